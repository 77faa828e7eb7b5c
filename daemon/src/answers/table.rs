//! Aligned plain-text tables, as `kubectl get` prints them (upper-case header, columns padded to the widest
//! cell, three spaces apart, no trailing spaces); pure.

/// Renders `header` and `rows` as an aligned table, one line each; an empty cell prints as `-`.
pub fn render_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let cell = |text: &str| if text.is_empty() { "-".to_owned() } else { text.to_owned() };
    let mut widths: Vec<usize> = header.iter().map(|title| title.chars().count()).collect();
    for row in rows {
        for (index, text) in row.iter().enumerate() {
            let width = cell(text).chars().count();
            match widths.get_mut(index) {
                Some(current) => *current = (*current).max(width),
                None => widths.push(width),
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let mut text = String::new();
        for (index, value) in cells.into_iter().enumerate() {
            text.push_str(&value);
            if index < last {
                let pad = widths.get(index).copied().unwrap_or_default().saturating_sub(value.chars().count());
                text.push_str(&" ".repeat(pad + 3));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(header.iter().map(|title| (*title).to_owned()).collect());
    for row in rows {
        line(row.iter().map(|text| cell(text)).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_padded_to_the_widest_cell_and_empty_cells_print_a_dash() {
        let table = render_table(
            &["TIER", "USED", "QUOTA"],
            &[vec!["gold".into(), "".into(), "8".into()], vec!["bronze".into(), "12".into(), "16".into()]],
        );
        assert_eq!(table, "TIER     USED   QUOTA\ngold     -      8\nbronze   12     16\n");
    }
}
