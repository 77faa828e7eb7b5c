//! Syntax checks for Kubernetes label keys, label values and node names, shared by the parsers; no I/O.

/// Why `key` is not a valid label key, or `None` when it is.
pub(crate) fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && let Some(problem) = dns_subdomain_problem(prefix)
    {
        return Some(format!("label key prefix `{prefix}` {problem}"));
    }
    if name.is_empty() {
        return Some(format!("label key `{key}` has an empty name"));
    }
    label_value_problem(name).map(|problem| format!("label key `{key}`: {problem}"))
}

/// Why `value` is not a valid label value (empty is valid), or `None` when it is.
pub(crate) fn label_value_problem(value: &str) -> Option<String> {
    if value.len() > 63 {
        return Some(format!("`{value}` is longer than 63 characters"));
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    if !value.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.')) {
        return Some(format!("`{value}` may only contain letters, digits, `-`, `_` and `.`"));
    }
    let bad_ends = !(value.starts_with(alnum) && value.ends_with(alnum));
    if !value.is_empty() && bad_ends {
        return Some(format!("`{value}` must start and end with a letter or digit"));
    }
    None
}

/// Why `name` is not a DNS subdomain (a node name, a label key prefix), or `None` when it is.
pub(crate) fn dns_subdomain_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("is empty".to_owned());
    }
    if name.len() > 253 {
        return Some("is longer than 253 characters".to_owned());
    }
    let lower_alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !name.chars().all(|c| lower_alnum(c) || matches!(c, '-' | '.')) {
        return Some("may only contain lowercase letters, digits, `-` and `.`".to_owned());
    }
    if !(name.starts_with(lower_alnum) && name.ends_with(lower_alnum)) {
        return Some("must start and end with a lowercase letter or digit".to_owned());
    }
    None
}

/// Why `name` is not a DNS label (a namespace name), or `None` when it is.
pub(crate) fn dns_label_problem(name: &str) -> Option<String> {
    if name.contains('.') {
        return Some("may not contain `.`".to_owned());
    }
    if name.len() > 63 {
        return Some("is longer than 63 characters".to_owned());
    }
    dns_subdomain_problem(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixed_and_plain_label_keys_are_valid() {
        assert_eq!(label_key_problem("node.kubernetes.io/instance-type"), None);
        assert_eq!(label_key_problem("node-type"), None);
    }

    #[test]
    fn label_key_with_bad_prefix_or_empty_name_is_rejected() {
        assert!(label_key_problem("Bad_Prefix/x").is_some());
        assert!(label_key_problem("example.com/").is_some());
        assert!(label_key_problem("-x").is_some());
    }

    #[test]
    fn label_values_follow_kubernetes_syntax() {
        assert_eq!(label_value_problem(""), None);
        assert_eq!(label_value_problem("spot4vcpu16gb"), None);
        assert!(label_value_problem("a b").is_some());
        assert!(label_value_problem("-a").is_some());
        assert!(label_value_problem(&"a".repeat(64)).is_some());
    }

    #[test]
    fn node_and_namespace_names_follow_dns_syntax() {
        assert_eq!(dns_subdomain_problem("ip-10-0-0-1.ec2.internal"), None);
        assert!(dns_subdomain_problem("Node1").is_some());
        assert!(dns_label_problem("kube.system").is_some());
        assert_eq!(dns_label_problem("kube-system"), None);
    }
}
