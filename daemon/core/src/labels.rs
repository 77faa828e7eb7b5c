//! `Labels`: the compact, immutable label set the cached views keep (namespaces, nodes, pods), its keys and values
//! interned so 2,000 nodes hold one copy of each repeated key and value; no I/O.
//!
//! The strings are `internment::ArcIntern<str>`: reference counted, so a value no object carries any more (a
//! deleted node's hostname) is freed, and thread safe, so the watch tasks and the webhook share them. On the wire
//! a `Labels` is a plain map, exactly as `BTreeMap<String, String>` was.

use std::collections::BTreeMap;
use std::fmt;

use internment::ArcIntern;
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

type Text = ArcIntern<str>;

/// The labels of a `Labels` in key order, as `(key, value)`.
pub type Iter<'a> = std::iter::Map<std::slice::Iter<'a, (Text, Text)>, fn(&'a (Text, Text)) -> (&'a str, &'a str)>;

/// Labels sorted by key, each key once; cloning shares the strings.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Labels(Box<[(Text, Text)]>);

impl Labels {
    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.position(key).ok().map(|index| &*self.0[index].1)
    }

    /// Whether `key` is set (to any value, empty included).
    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    /// The labels in key order.
    pub fn iter(&self) -> Iter<'_> {
        self.0.iter().map(|(key, value)| (&**key, &**value))
    }

    /// The keys in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> + Clone + '_ {
        self.0.iter().map(|(key, _)| &**key)
    }

    /// How many labels are set.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no label is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A copy with `key` set to `value` (the strings stay shared).
    #[must_use]
    pub fn with(&self, key: &str, value: &str) -> Self {
        let mut pairs = self.0.to_vec();
        pairs.push((Text::from(key), Text::from(value)));
        Self::from_pairs(pairs)
    }

    /// The labels as an owned map, for the places that build a Kubernetes object from them.
    pub fn to_btree_map(&self) -> BTreeMap<String, String> {
        self.iter().map(|(key, value)| (key.to_owned(), value.to_owned())).collect()
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(candidate, _)| (**candidate).cmp(key))
    }

    /// Sorts by key and keeps the last value given for a key, as inserting into a map would.
    fn from_pairs(mut pairs: Vec<(Text, Text)>) -> Self {
        // `ArcIntern<str>` orders by the text, not the pointer.
        pairs.sort_by(|(a, _), (b, _)| a.cmp(b));
        pairs.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        Self(pairs.into_boxed_slice())
    }
}

/// Read access shared by a view's `Labels` and a request's `BTreeMap` (a nodeSelector, a pod's labels), so a rule
/// such as "these labels select GPU class X" is written once for both.
pub trait LabelLookup {
    /// The value of `key`, if set.
    fn label(&self, key: &str) -> Option<&str>;
    /// Every label, in key order.
    fn label_pairs(&self) -> impl Iterator<Item = (&str, &str)>;
}

impl LabelLookup for Labels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
    fn label_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.iter()
    }
}

impl LabelLookup for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
    fn label_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.iter().map(|(key, value)| (key.as_str(), value.as_str()))
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Labels {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        Self::from_pairs(
            pairs.into_iter().map(|(key, value)| (Text::from(key.as_ref()), Text::from(value.as_ref()))).collect(),
        )
    }
}

impl<K: AsRef<str>, V: AsRef<str>, const N: usize> From<[(K, V); N]> for Labels {
    fn from(pairs: [(K, V); N]) -> Self {
        pairs.into_iter().collect()
    }
}

impl From<BTreeMap<String, String>> for Labels {
    fn from(map: BTreeMap<String, String>) -> Self {
        map.into_iter().collect()
    }
}

impl From<&BTreeMap<String, String>> for Labels {
    fn from(map: &BTreeMap<String, String>) -> Self {
        map.iter().collect()
    }
}

impl<'a> IntoIterator for &'a Labels {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl PartialEq<BTreeMap<String, String>> for Labels {
    fn eq(&self, other: &BTreeMap<String, String>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter().map(|(key, value)| (key.as_str(), value.as_str())))
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Labels {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (key, value) in self.iter() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LabelsVisitor;

        impl<'de> Visitor<'de> for LabelsVisitor {
            type Value = Labels;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a map of label keys to string values")
            }

            // Interned straight from the decoder's text: no intermediate `String` per key or value.
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Labels, A::Error> {
                let mut pairs = Vec::with_capacity(access.size_hint().unwrap_or(0));
                while let Some(pair) = access.next_entry::<Text, Text>()? {
                    pairs.push(pair);
                }
                Ok(Labels::from_pairs(pairs))
            }
        }

        deserializer.deserialize_map(LabelsVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect()
    }

    #[test]
    fn labels_answer_like_the_map_they_were_built_from() {
        let source = map(&[("zone", "a"), ("app", "web"), ("empty", "")]);
        let labels = Labels::from(source.clone());
        assert_eq!(labels.get("app"), Some("web"));
        assert_eq!(labels.get("empty"), Some(""));
        assert_eq!(labels.get("missing"), None);
        assert!(labels.contains_key("empty") && !labels.contains_key("missing"));
        assert_eq!(labels.iter().collect::<Vec<_>>(), vec![("app", "web"), ("empty", ""), ("zone", "a")]);
        assert_eq!(labels.len(), 3);
        assert!(!labels.is_empty() && Labels::default().is_empty());
        assert_eq!(labels, source);
        assert_eq!(labels.to_btree_map(), source);
        assert_eq!(labels.with("app", "db").get("app"), Some("db"));
        assert_eq!(labels.with("new", "1").len(), 4);
    }

    #[test]
    fn a_key_given_twice_keeps_its_last_value_as_a_map_would() {
        let labels: Labels = [("b", "1"), ("a", "x"), ("b", "2"), ("b", "3")].into_iter().collect();
        assert_eq!(labels.iter().collect::<Vec<_>>(), vec![("a", "x"), ("b", "3")]);
        let decoded: Labels = serde_json::from_str(r#"{"b": "1", "a": "x", "b": "2"}"#).unwrap();
        assert_eq!(decoded.iter().collect::<Vec<_>>(), vec![("a", "x"), ("b", "2")]);
    }

    #[test]
    fn labels_travel_as_the_same_json_and_yaml_map_as_a_btree_map() {
        let source = map(&[("tenant.kubenexus.io/tier", "gold"), ("kubernetes.io/metadata.name", "team-a")]);
        let labels = Labels::from(source.clone());
        assert_eq!(serde_json::to_string(&labels).unwrap(), serde_json::to_string(&source).unwrap());
        assert_eq!(serde_saphyr::to_string(&labels).unwrap(), serde_saphyr::to_string(&source).unwrap());
        let escaped: Labels = serde_json::from_str(r#"{"a\"b": "c\nd"}"#).unwrap();
        assert_eq!(escaped.get("a\"b"), Some("c\nd"));
        assert_eq!(serde_saphyr::from_str::<Labels>("b: '2'\na: x\n").unwrap(), map(&[("a", "x"), ("b", "2")]));
        assert!(serde_json::from_str::<Labels>(r#"{"a": 1}"#).is_err(), "label values are strings");
    }

    #[test]
    fn equal_labels_on_different_objects_share_their_strings() {
        let first: Labels = [("kubernetes.io/os", "linux")].into_iter().collect();
        let second: Labels = [("kubernetes.io/os".to_owned(), "linux".to_owned())].into_iter().collect();
        assert_eq!(first, second);
        let (key_a, value_a) = first.iter().next().unwrap();
        let (key_b, value_b) = second.iter().next().unwrap();
        assert!(std::ptr::eq(key_a, key_b) && std::ptr::eq(value_a, value_b));
    }
}
