//! A Kubernetes resource quantity parser for validation (sign, size, comparison); pure.
//!
//! Accepts exactly apimachinery's grammar (`resource.ParseQuantity`):
//! `[+-]? (digits[.digits?] | .digits) (Ki|Mi|Gi|Ti|Pi|Ei | n|u|m|k|M|G|T|P|E | [eE][+-]?digits)?`.
//! The `kube_quantity` crate was considered and not used: it parses the number as a float with nom's `double`,
//! so it also accepts forms the API server refuses (`Gi` with no number, `nan`, `inf`). The value is kept as an
//! `f64`, which is exact enough to compare limits; tiergate never does arithmetic on quotas.

/// A parsed quantity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ParsedQuantity {
    /// The value in base units (e.g. bytes for `4Ti`, cores for `500m`).
    pub value: f64,
}

impl ParsedQuantity {
    /// True for values below zero (`-1`; `-0` is zero).
    pub fn is_negative(&self) -> bool {
        self.value < 0.0
    }
}

/// Parses `text` as a Kubernetes quantity; `None` when the API server would refuse it.
pub fn parse_quantity(text: &str) -> Option<ParsedQuantity> {
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let mantissa = parse_unsigned_decimal(number)?;
    let scale = suffix_scale(suffix)?;
    let value = mantissa * scale;
    value.is_finite().then_some(ParsedQuantity { value: if negative { -value } else { value } })
}

/// `digits[.digits?] | .digits`.
fn parse_unsigned_decimal(number: &str) -> Option<f64> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits_only = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
    let valid = digits_only(whole) && digits_only(fraction) && !(whole.is_empty() && fraction.is_empty());
    if !valid {
        return None;
    }
    format!("{}.{}", if whole.is_empty() { "0" } else { whole }, if fraction.is_empty() { "0" } else { fraction })
        .parse()
        .ok()
}

fn suffix_scale(suffix: &str) -> Option<f64> {
    let binary = |power: i32| Some(1024f64.powi(power));
    let decimal = |power: i32| Some(10f64.powi(power));
    match suffix {
        "" => decimal(0),
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
                return None;
            }
            exponent.parse::<i32>().ok().map(|power| 10f64.powi(power))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_forms_kubernetes_accepts() {
        let cases =
            [("64", 64.0), ("500m", 0.5), ("4Ti", 4.0 * 1024f64.powi(4)), ("1.5", 1.5), (".5", 0.5), ("5.", 5.0)];
        for (text, value) in cases {
            assert_eq!(parse_quantity(text).map(|q| q.value), Some(value), "{text}");
        }
        assert_eq!(parse_quantity("1e3").map(|q| q.value), Some(1000.0));
        assert_eq!(parse_quantity("+2k").map(|q| q.value), Some(2000.0));
        assert!(parse_quantity("-1").is_some_and(|q| q.is_negative()));
        assert!(!parse_quantity("-0").is_some_and(|q| q.is_negative()));
    }

    #[test]
    fn refuses_what_kubernetes_refuses() {
        for text in ["", "Gi", "1.2.3", "1 Gi", "1gi", "1KiB", "nan", "inf", "1e", "1e1.5", "--1", ".", "1Ki2"] {
            assert_eq!(parse_quantity(text), None, "{text}");
        }
    }
}
