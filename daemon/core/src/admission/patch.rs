//! The JSON patch (RFC 6902) of a decision, built at the JSON pointers the decision wrote: add, replace or remove
//! there, creating parents the object lacks; no I/O.
//!
//! `before` and `after` are lean views (`admission::lean`): an `env` list holds only some of the full object's
//! entries, so items appended to it are written as `…/env/-`, and any other change to a pruned part (replacing or
//! removing a value holding an `env` list, or the top `metadata`, which lacks `managedFields`) is refused rather
//! than written wrong.

use std::borrow::Cow;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::Value;

use super::lean::PRUNED_ARRAY_KEY;

/// A patch tiergate cannot write exactly against the full object.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// A change to a part of the object the lean view does not hold whole.
    #[error("failed to build the patch: the decision changed {pointer}, which the lean view holds only in part")]
    Pruned {
        /// Where.
        pointer: String,
    },
    /// A pointer that is not RFC 6901.
    #[error("failed to build the patch: {pointer} is not a JSON pointer")]
    Pointer {
        /// The pointer.
        pointer: String,
    },
}

impl PatchError {
    /// Fixed reason for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Pruned { .. } => "patch_pruned",
            Self::Pointer { .. } => "patch_pointer",
        }
    }
}

/// The pointer to member `key` of the value at `parent`: `key` escaped as one token (RFC 6901), in one allocation.
pub fn child_pointer(parent: &str, key: &str) -> String {
    let mut pointer = String::with_capacity(parent.len() + 1 + key.len() + 4);
    pointer.push_str(parent);
    pointer.push('/');
    for character in key.chars() {
        match character {
            '~' => pointer.push_str("~0"),
            '/' => pointer.push_str("~1"),
            _ => pointer.push(character),
        }
    }
    pointer
}

/// The value at `pointer` (RFC 6901), like `Value::pointer` but allocating only for a token with `~`.
fn lookup<'v>(value: &'v Value, pointer: &str) -> Option<&'v Value> {
    if pointer.is_empty() {
        return Some(value);
    }
    pointer.strip_prefix('/')?.split('/').try_fold(value, child)
}

/// One pointer token unescaped (RFC 6901), borrowed when it holds no `~`.
fn unescape(token: &str) -> Cow<'_, str> {
    match token.contains('~') {
        true => Cow::Owned(token.replace("~1", "/").replace("~0", "~")),
        false => Cow::Borrowed(token),
    }
}

/// The member or item of `value` named by one pointer token (escaped).
fn child<'v>(value: &'v Value, token: &str) -> Option<&'v Value> {
    let token = unescape(token);
    match value {
        Value::Object(map) => map.get(token.as_ref()),
        Value::Array(items) => items.get(parse_index(&token)?),
        _ => None,
    }
}

/// `child`, mutable.
fn child_mut<'v>(value: &'v mut Value, token: &str) -> Option<&'v mut Value> {
    let token = unescape(token);
    match value {
        Value::Object(map) => map.get_mut(token.as_ref()),
        Value::Array(items) => items.get_mut(parse_index(&token)?),
        _ => None,
    }
}

/// `Value::pointer` and `Value::pointer_mut` without their two allocations per token.
pub(super) trait Lookup {
    /// The value at `pointer` (RFC 6901).
    fn lookup(&self, pointer: &str) -> Option<&Value>;

    /// The value at `pointer` (RFC 6901), mutable.
    fn lookup_mut(&mut self, pointer: &str) -> Option<&mut Value>;
}

impl Lookup for Value {
    fn lookup(&self, pointer: &str) -> Option<&Value> {
        lookup(self, pointer)
    }

    fn lookup_mut(&mut self, pointer: &str) -> Option<&mut Value> {
        if pointer.is_empty() {
            return Some(self);
        }
        pointer.strip_prefix('/')?.split('/').try_fold(self, child_mut)
    }
}

/// An array index token: digits without a leading zero (RFC 6901).
fn parse_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() > 1) {
        return None;
    }
    token.parse().ok()
}

/// The patch from `before` to `after`, looking only at `written` (the pointers the decision edited, escaped).
pub fn patch_at(before: &Value, after: &Value, written: &[String]) -> Result<Patch, PatchError> {
    // Where each edit is compared: its pointer, or the first ancestor that is not a container of the same kind on
    // both sides (a parent the decision created, or a null it replaced with a map). Prefixes of an escaped pointer
    // cut at a `/` are escaped pointers themselves.
    let mut written: Vec<&str> = written.iter().map(String::as_str).collect();
    written.sort_unstable();
    written.dedup();
    let mut roots: Vec<&str> = written.into_iter().map(|pointer| compared_at(before, after, pointer)).collect();
    roots.sort_unstable();
    roots.dedup();
    // An edit inside another edit is covered by the outer one.
    let inside = |root: &str, other: &str| {
        other.len() < root.len() && root.starts_with(other) && root[other.len()..].starts_with('/')
    };
    let mut builder = Builder { operations: Vec::new() };
    for root in roots.iter().filter(|root| !roots.iter().any(|other| inside(root, other))) {
        builder.compare(root, lookup(before, root), lookup(after, root))?;
    }
    Ok(Patch(builder.operations))
}

/// Where the edit at `pointer` is compared: its first prefix (cut at a `/`) that is not a container of the same
/// kind in both trees (a parent the decision created, or a null it replaced with a map), else the pointer itself;
/// found in one walk down both trees. Prefixes of an escaped pointer cut at a `/` are escaped pointers themselves.
fn compared_at<'p>(before: &Value, after: &Value, pointer: &'p str) -> &'p str {
    let same_kind = |before: Option<&Value>, after: Option<&Value>| {
        matches!(
            (before, after),
            (Some(Value::Object(_)), Some(Value::Object(_))) | (Some(Value::Array(_)), Some(Value::Array(_)))
        )
    };
    let Some(tokens) = pointer.strip_prefix('/') else { return pointer };
    let (mut before, mut after) = (Some(before), Some(after));
    let mut end = 0;
    for token in tokens.split('/') {
        if !same_kind(before, after) {
            return &pointer[..end];
        }
        before = before.and_then(|value| child(value, token));
        after = after.and_then(|value| child(value, token));
        end += 1 + token.len();
    }
    pointer
}

struct Builder {
    operations: Vec<PatchOperation>,
}

impl Builder {
    fn compare(&mut self, path: &str, before: Option<&Value>, after: Option<&Value>) -> Result<(), PatchError> {
        match (before, after) {
            (None, None) => Ok(()),
            (None, Some(value)) => self.add(path, value.clone()),
            (Some(value), None) => {
                guard(path, value)?;
                self.remove(path)
            }
            (Some(before), Some(after)) if before == after => Ok(()),
            (Some(before), Some(after)) => self.diff(path, before, after),
        }
    }

    /// The operations from `before` to `after`, which differ (each pair is compared once, by its caller).
    fn diff(&mut self, path: &str, before: &Value, after: &Value) -> Result<(), PatchError> {
        match (before, after) {
            (Value::Object(old), Value::Object(new)) => {
                for key in old.keys().filter(|key| !new.contains_key(*key)) {
                    let child = child_pointer(path, key);
                    self.compare(&child, old.get(key), None)?;
                }
                for (key, value) in new {
                    match old.get(key) {
                        Some(was) if was == value => {}
                        Some(was) => self.diff(&child_pointer(path, key), was, value)?,
                        None => self.add(child_pointer(path, key), value.clone())?,
                    }
                }
                Ok(())
            }
            (Value::Array(old), Value::Array(new)) if path.ends_with(&format!("/{PRUNED_ARRAY_KEY}")) => {
                // A pruned list: the full object has more entries, so only appending is exact.
                if new.len() < old.len() || new[..old.len()] != old[..] {
                    return Err(PatchError::Pruned { pointer: path.to_owned() });
                }
                for value in &new[old.len()..] {
                    self.add(format!("{path}/-"), value.clone())?;
                }
                Ok(())
            }
            (Value::Array(old), Value::Array(new)) if old.len() == new.len() => {
                for (index, (old, new)) in old.iter().zip(new).enumerate().filter(|(_, (old, new))| old != new) {
                    self.diff(&format!("{path}/{index}"), old, new)?;
                }
                Ok(())
            }
            (Value::Array(old), Value::Array(new)) if new.starts_with(old) => {
                for (index, value) in new.iter().enumerate().skip(old.len()) {
                    self.add(format!("{path}/{index}"), value.clone())?;
                }
                Ok(())
            }
            (Value::Array(old), Value::Array(new)) if old.starts_with(new) => {
                for index in (new.len()..old.len()).rev() {
                    self.compare(&format!("{path}/{index}"), old.get(index), None)?;
                }
                Ok(())
            }
            _ => {
                guard(path, before)?;
                self.push(path, |path| PatchOperation::Replace(ReplaceOperation { path, value: after.clone() }))
            }
        }
    }

    fn add(&mut self, path: impl Into<String>, value: Value) -> Result<(), PatchError> {
        self.push(path, |path| PatchOperation::Add(AddOperation { path, value }))
    }

    fn remove(&mut self, path: impl Into<String>) -> Result<(), PatchError> {
        self.push(path, |path| PatchOperation::Remove(RemoveOperation { path }))
    }

    /// Appends the operation at `path`, moved into the pointer (not copied).
    fn push(
        &mut self,
        path: impl Into<String>,
        operation: impl FnOnce(PointerBuf) -> PatchOperation,
    ) -> Result<(), PatchError> {
        let pointer =
            PointerBuf::parse(path).map_err(|error| PatchError::Pointer { pointer: error.subject().to_owned() })?;
        self.operations.push(operation(pointer));
        Ok(())
    }
}

/// Refuses to replace or remove a value the lean view holds only in part.
fn guard(path: &str, value: &Value) -> Result<(), PatchError> {
    fn holds_pruned(value: &Value) -> bool {
        match value {
            Value::Object(map) => map.iter().any(|(key, value)| key == PRUNED_ARRAY_KEY || holds_pruned(value)),
            Value::Array(items) => items.iter().any(holds_pruned),
            _ => false,
        }
    }
    if path.is_empty() || path == "/metadata" || holds_pruned(value) {
        return Err(PatchError::Pruned { pointer: if path.is_empty() { "/".to_owned() } else { path.to_owned() } });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn applied(full: &Value, patch: &Patch) -> Value {
        let mut object = full.clone();
        json_patch::patch(&mut object, patch).unwrap();
        object
    }

    #[test]
    fn missing_parents_are_created_by_one_add_at_the_first_missing_one() {
        let before = json!({"metadata": {"name": "j"}, "spec": {}});
        let after = json!({"metadata": {"name": "j", "labels": {"a/b": "1", "c~d": "2"}}, "spec": {}});
        let patch =
            patch_at(&before, &after, &["/metadata/labels/a~1b".into(), "/metadata/labels/c~0d".into()]).unwrap();
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([{"op": "add", "path": "/metadata/labels",
            "value": {"a/b": "1", "c~d": "2"}}])
        );
        assert_eq!(applied(&before, &patch), after);
    }

    #[test]
    fn keys_with_slashes_and_tildes_are_escaped_in_each_operation() {
        let before = json!({"metadata": {"labels": {"x": "1", "k/q~": "old"}}});
        let after = json!({"metadata": {"labels": {"k/q~": "new", "n/e~w": "v"}}});
        let patch = patch_at(&before, &after, &["/metadata/labels".into()]).unwrap();
        let paths: Vec<String> = patch.0.iter().map(|op| op.path().to_string()).collect();
        assert_eq!(paths, ["/metadata/labels/x", "/metadata/labels/k~1q~0", "/metadata/labels/n~1e~0w"]);
        assert_eq!(applied(&before, &patch), after);
    }

    #[test]
    fn an_entry_appended_to_a_pruned_env_list_lands_after_the_full_lists_entries() {
        let full = json!({"spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]}});
        let lean = json!({"spec": {"containers": [{"name": "c", "env": []}]}});
        let mut after = lean.clone();
        after["spec"]["containers"][0]["env"] = json!([{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]);
        let patch = patch_at(&lean, &after, &["/spec".into()]).unwrap();
        assert_eq!(
            applied(&full, &patch)["spec"]["containers"][0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "CUDA_VISIBLE_DEVICES", "value": "0"}])
        );
    }

    #[test]
    fn replacing_a_value_that_holds_a_pruned_list_is_refused_not_written_wrong() {
        let before = json!({"spec": {"containers": [{"name": "c", "env": []}]}});
        let after = json!({"spec": {"containers": "gone"}});
        let error = patch_at(&before, &after, &["/spec/containers".into()]).unwrap_err();
        assert_eq!(error.reason(), "patch_pruned");
        let edited_env = json!({"spec": {"containers": [{"name": "c", "env": [{"name": "X"}]}]}});
        let reordered = json!({"spec": {"containers": [{"name": "c", "env": [{"name": "Y"}]}]}});
        assert!(patch_at(&edited_env, &reordered, &["/spec".into()]).is_err());
    }

    #[test]
    fn an_edit_outside_the_written_pointers_is_not_in_the_patch() {
        let before = json!({"a": 1, "b": 1});
        let after = json!({"a": 2, "b": 2});
        let patch = patch_at(&before, &after, &["/a".into()]).unwrap();
        assert_eq!(applied(&before, &patch), json!({"a": 2, "b": 1}));
    }

    #[test]
    fn a_null_turned_into_a_map_is_replaced_and_tail_items_removed_from_the_end() {
        let before = json!({"spec": {"nodeSelector": null, "tolerations": [1, 2, 3]}});
        let after = json!({"spec": {"nodeSelector": {"gpu": "l4"}, "tolerations": [1]}});
        let patch = patch_at(&before, &after, &["/spec/nodeSelector/gpu".into(), "/spec/tolerations".into()]).unwrap();
        assert_eq!(applied(&before, &patch), after);
    }

    #[test]
    fn lookup_reads_and_writes_where_serde_json_pointers_do() {
        let mut value = json!({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q", "a~b": 1}},
            "items": [{"x": 1}, {"x": 2}], "": {"empty": true}});
        let pointers = [
            "",
            "/metadata/labels/kueue.x-k8s.io~1queue-name",
            "/metadata/labels/a~0b",
            "/items/1/x",
            "/items/01",
            "/items/+1",
            "/items/2",
            "/",
            "/missing",
            "no-slash",
        ];
        for pointer in pointers {
            assert_eq!(value.lookup(pointer), value.pointer(pointer), "{pointer}");
            let expected = value.clone().pointer_mut(pointer).cloned();
            assert_eq!(value.lookup_mut(pointer).cloned(), expected, "{pointer}");
        }
        *value.lookup_mut("/items/0/x").unwrap() = json!(9);
        assert_eq!(value["items"][0]["x"], 9);
    }

    #[test]
    fn a_child_pointer_escapes_its_key_as_one_token() {
        let cases = [
            ("plain", "/l/plain"),
            ("kueue.x-k8s.io/queue-name", "/l/kueue.x-k8s.io~1queue-name"),
            ("a~b", "/l/a~0b"),
            ("~1/~0", "/l/~01~1~00"),
            ("", "/l/"),
        ];
        for (key, pointer) in cases {
            assert_eq!(child_pointer("/l", key), pointer);
            assert_eq!(json!({"l": {key: 1}}).pointer(pointer), Some(&json!(1)), "{pointer}");
        }
    }
}
