//! Markdown pieces the generated references share: the generated-file line and table cells.

/// The first line of a generated file: what it is generated from and the command that regenerates it.
pub fn generated_line(source: &str) -> String {
    format!(
        "_Generated from {source} by `daemon/tests/reference_docs.rs`; do not edit, regenerate with `{}`._\n",
        super::REGENERATE
    )
}

/// Text as one table cell: one line, `|` escaped, and `<`, `>` and `&` outside code spans written as entities (a
/// placeholder such as `<release>` would otherwise read as an HTML tag and vanish).
pub fn cell(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|");
    let mut out = String::with_capacity(line.len());
    for (index, part) in line.split('`').enumerate() {
        if index > 0 {
            out.push('`');
        }
        if index % 2 == 1 {
            out.push_str(part);
        } else {
            out.push_str(&part.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;"));
        }
    }
    out
}

/// Text inside a code span in a table cell: one line, `|` escaped.
fn code_cell(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|")
}

/// Text as a code span in a table cell (empty stays empty).
pub fn code(text: &str) -> String {
    if text.is_empty() {
        return String::new();
    }
    let fence = if text.contains('`') { "`` " } else { "`" };
    let close = if text.contains('`') { " ``" } else { "`" };
    format!("{fence}{}{close}", code_cell(text))
}

/// A Markdown table: the header row, the separator, one line per row.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n|{}\n", header.join(" | "), "---|".repeat(header.len()));
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}
