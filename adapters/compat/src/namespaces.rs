//! Seed 004's `BLOCKLISTED_NAMESPACE_LIST` (a comma-separated list of namespaces the webhook leaves alone)
//! parsed into namespace names; no I/O.

use crate::labels::dns_label_problem;

/// The environment variable seed 004 reads.
pub const BLOCKLIST_ENV: &str = "BLOCKLISTED_NAMESPACE_LIST";

/// A blocklist entry that is not a namespace name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "failed to parse BLOCKLISTED_NAMESPACE_LIST `{input}`: entry {position} `{entry}` {problem}; write namespace names separated by commas, e.g. `kube-system,kube-public,default`"
)]
pub struct NamespaceListError {
    /// The value as given.
    pub input: String,
    /// 1-based position of the bad entry.
    pub position: usize,
    /// The bad entry.
    pub entry: String,
    /// What is wrong with it.
    pub problem: String,
}

impl NamespaceListError {
    /// Fixed reason for metrics and events.
    pub fn reason(&self) -> &'static str {
        "parse_namespace_blocklist"
    }
}

/// Parses `kube-system,kube-public,default` into names, in order, without duplicates. Spaces around entries
/// are tolerated (seed 004 forbade them); an empty value is an empty list; an empty entry is an error.
pub fn parse_namespace_blocklist(input: &str) -> Result<Vec<String>, NamespaceListError> {
    if input.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut names: Vec<String> = Vec::new();
    for (index, entry) in input.split(',').enumerate() {
        let entry = entry.trim();
        if let Some(problem) = dns_label_problem(entry) {
            return Err(NamespaceListError {
                input: input.to_owned(),
                position: index + 1,
                entry: entry.to_owned(),
                problem,
            });
        }
        if !names.iter().any(|name| name == entry) {
            names.push(entry.to_owned());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_004_default_list_gives_three_namespaces() {
        assert_eq!(
            parse_namespace_blocklist("kube-system,kube-public,default").unwrap(),
            ["kube-system", "kube-public", "default"]
        );
    }

    #[test]
    fn spaces_after_commas_and_duplicates_are_tolerated() {
        assert_eq!(parse_namespace_blocklist("a, b ,a").unwrap(), ["a", "b"]);
    }

    #[test]
    fn an_empty_value_blocks_nothing() {
        assert!(parse_namespace_blocklist("").unwrap().is_empty());
    }

    #[test]
    fn an_empty_entry_or_bad_name_is_rejected_naming_the_entry() {
        let error = parse_namespace_blocklist("kube-system,,default").unwrap_err();
        assert_eq!((error.position, error.entry.as_str()), (2, ""));
        let error = parse_namespace_blocklist("kube-system,Team_A").unwrap_err();
        assert!(error.to_string().contains("entry 2 `Team_A`"), "{error}");
        assert_eq!(error.reason(), "parse_namespace_blocklist");
    }
}
