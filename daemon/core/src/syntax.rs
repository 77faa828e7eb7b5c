//! The name and label syntax Kubernetes accepts (apimachinery's `IsDNS1123Label`, `IsDNS1123Subdomain`,
//! `IsQualifiedName`, `IsValidLabelValue`), Go's duration syntax (Kueue's Configuration), as predicates, the
//! policy's own durations (read by jiff, more than zero), the IANA time zone names the policy's times are written in,
//! and the RFC 3339 instants its status writes; pure.

/// What a DNS-1123 label looks like, for error messages.
pub const DNS_LABEL_RULE: &str =
    "a DNS-1123 label: at most 63 lowercase letters, digits or '-', starting and ending with a letter or digit";
/// What a DNS-1123 subdomain looks like, for error messages.
pub const DNS_SUBDOMAIN_RULE: &str =
    "a DNS-1123 subdomain: at most 253 characters, dot-separated DNS-1123 labels (lowercase letters, digits, '-')";
/// What a qualified name (label key, resource name) looks like, for error messages.
pub const QUALIFIED_NAME_RULE: &str = "a qualified name: an optional DNS subdomain prefix and '/', then at most 63 \
     letters, digits, '-', '_' or '.', starting and ending with a letter or digit (e.g. `gpu.nvidia.com/class`)";
/// What a label value looks like, for error messages.
pub const LABEL_VALUE_RULE: &str =
    "a label value: empty, or at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit";

/// Longest DNS-1123 label (and label value, and name part of a qualified name).
pub const MAX_LABEL_LENGTH: usize = 63;
/// Longest DNS-1123 subdomain.
pub const MAX_SUBDOMAIN_LENGTH: usize = 253;

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    let alnum = |byte: &u8| byte.is_ascii_lowercase() || byte.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            bytes.len() <= MAX_LABEL_LENGTH
                && alnum(first)
                && alnum(last)
                && bytes.iter().all(|byte| alnum(byte) || *byte == b'-')
        }
        _ => false,
    }
}

/// Dot-separated DNS labels, at most 253 characters.
pub fn is_dns_subdomain(value: &str) -> bool {
    value.len() <= MAX_SUBDOMAIN_LENGTH && value.split('.').all(is_dns_label)
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters, non-empty.
fn is_name_part(value: &str) -> bool {
    !value.is_empty() && is_label_value(value)
}

/// A label value: empty, or a name part.
pub fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            bytes.len() <= MAX_LABEL_LENGTH
                && first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes.iter().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'))
        }
        _ => true,
    }
}

/// `[prefix/]name`: label keys, annotation keys and resource names.
pub fn is_qualified_name(value: &str) -> bool {
    match value.split_once('/') {
        Some((prefix, name)) => !prefix.is_empty() && is_dns_subdomain(prefix) && is_name_part(name),
        None => is_name_part(value),
    }
}

/// A fixed snake_case reason as a Kubernetes condition reason: `apply_object` -> `ApplyObject`.
pub fn condition_reason(snake: &str) -> String {
    snake
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map(|first| first.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect()
}

/// A Go duration (`time.ParseDuration`: one or more decimal numbers, each with a unit of ns, us, µs, ms, s, m or h,
/// e.g. `168h`, `1h30m`, `1.5s`) in whole nanoseconds, or `None` when `text` is not one.
pub fn go_duration_nanos(text: &str) -> Option<u128> {
    const UNITS: [(&str, f64); 7] =
        [("ns", 1.0), ("us", 1e3), ("µs", 1e3), ("ms", 1e6), ("s", 1e9), ("m", 60e9), ("h", 3600e9)];
    if text == "0" {
        return Some(0);
    }
    let mut rest = text;
    let mut total = 0.0_f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let (unit, scale) =
            UNITS.iter().filter(|(unit, _)| rest.starts_with(unit)).max_by_key(|(unit, _)| unit.len())?;
        rest = &rest[unit.len()..];
        total += number * scale;
    }
    total.is_finite().then_some(total as u128)
}

/// Why a policy duration does not read as one more than zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurationProblem {
    /// Not a duration jiff reads (`4h`, `90m`, `1h30m`, `PT4H`).
    NotADuration,
    /// Zero or negative.
    NotPositive,
}

/// A policy duration (`4h`, `2000h`, `720h`; surrounding blanks ignored), read by jiff, that is more than zero.
pub fn parse_positive_duration(text: &str) -> Result<jiff::SignedDuration, DurationProblem> {
    let duration: jiff::SignedDuration = text.trim().parse().map_err(|_| DurationProblem::NotADuration)?;
    if duration.is_negative() || duration.is_zero() {
        return Err(DurationProblem::NotPositive);
    }
    Ok(duration)
}

/// The IANA time zone `name` (from the system's tz database, or the copy compiled in); `None` for an empty or
/// unknown name.
pub fn find_time_zone(name: &str) -> Option<jiff::tz::TimeZone> {
    if name.trim().is_empty() {
        return None;
    }
    jiff::tz::TimeZone::get(name).ok()
}

/// A Unix second as RFC 3339 (`2026-12-01T00:00:00Z`); empty outside jiff's range of years.
pub fn format_instant(second: i64) -> String {
    jiff::Timestamp::from_second(second).map(|instant| instant.to_string()).unwrap_or_default()
}

/// An RFC 3339 instant (with an offset or `Z`; surrounding blanks ignored).
pub fn parse_timestamp(text: &str) -> Option<jiff::Timestamp> {
    text.trim().parse().ok()
}

/// An RFC 3339 instant as a Unix second (a fraction of a second dropped).
pub fn parse_instant(text: &str) -> Option<i64> {
    parse_timestamp(text).map(|instant| instant.as_second())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_duration_must_read_and_be_more_than_zero() {
        assert_eq!(parse_positive_duration(" 4h "), Ok(jiff::SignedDuration::from_hours(4)));
        assert_eq!(parse_positive_duration("1.5s"), Ok(jiff::SignedDuration::from_millis(1500)));
        assert_eq!(parse_positive_duration("four hours"), Err(DurationProblem::NotADuration));
        assert_eq!(parse_positive_duration("0s"), Err(DurationProblem::NotPositive));
        assert_eq!(parse_positive_duration("-1h"), Err(DurationProblem::NotPositive));
    }

    #[test]
    fn dns_labels_follow_kubernetes() {
        for good in ["gold", "a100", "tiergate-gold", "0", &"a".repeat(63)] {
            assert!(is_dns_label(good), "{good}");
        }
        for bad in ["", "Gold", "-gold", "gold-", "go_ld", "go.ld", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }

    #[test]
    fn qualified_names_follow_kubernetes() {
        for good in ["cpu", "nvidia.com/gpu", "tenant.kubenexus.io/tier", "node-type", "A_b.c"] {
            assert!(is_qualified_name(good), "{good}");
        }
        for bad in ["", "/gpu", "nvidia.com/", "Nvidia.com/gpu", "a/b/c", "-x", "x-", "has space"] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
    }

    #[test]
    fn label_values_may_be_empty_but_not_odd() {
        assert!(is_label_value(""));
        assert!(is_label_value("H100_80GB.v2"));
        assert!(!is_label_value("a/b"));
        assert!(!is_label_value(&"a".repeat(64)));
    }

    #[test]
    fn subdomains_allow_dots() {
        assert!(is_dns_subdomain("check-capacity.autoscaling.x-k8s.io"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain("A.b"));
    }

    #[test]
    fn go_durations_parse_as_go_parses_them() {
        assert_eq!(go_duration_nanos("168h"), Some(168 * 3600 * 1_000_000_000));
        assert_eq!(go_duration_nanos("1h30m"), Some(5400 * 1_000_000_000));
        assert_eq!(go_duration_nanos("1.5s"), Some(1_500_000_000));
        assert_eq!(go_duration_nanos("250ms"), Some(250_000_000));
        assert_eq!(go_duration_nanos("0"), Some(0));
        assert_eq!(go_duration_nanos("0s"), Some(0));
        for bad in ["", "7d", "1 h", "h", "5", "-5m", "1.2.3s"] {
            assert_eq!(go_duration_nanos(bad), None, "{bad}");
        }
    }
}
