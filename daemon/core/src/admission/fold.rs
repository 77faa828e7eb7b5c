//! The patch as kube-apiserver applies it cheapest: the edits deep inside one top-level member of the object (a
//! Job's `/spec/template/spec/nodeSelector`) folded into one `replace` of that member, written from the request's
//! object as sent with the same operations applied; pure, no I/O.
//!
//! kube-apiserver applies a webhook's patch with evanphx/json-patch v4: each object on an edited path is parsed,
//! and on the way out every parsed level is marshalled and compacted again by its parent, so an edit four levels
//! down passes over a Job's pod template about eight times, where one `replace /spec` passes over it three times
//! (the patch, the object, the result). On a 2-core API server that was 0.4 ms of CPU per GPU Job (issue 52,
//! docs/performance.md). The object the API server stores is the same either way: [`fold_deep_edits`] returns
//! `None` (keep the patch as built) whenever it cannot prove that, and the tests apply both patches to every
//! recorded review.
//!
//! The folded member is never built as a `serde_json::Value`: the review body is read once, and only the objects
//! and arrays on an edited path are split into their members; everything else is copied into the patch as the
//! bytes the API server sent (a Job's containers and their env lists pass through untouched).

use std::borrow::Cow;
use std::fmt;

use json_patch::jsonptr::PointerBuf;
use json_patch::{Patch, PatchOperation};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// Pointer depth from which an edit is folded: `/spec/template/spec/nodeSelector` (4) and `/spec/suspend` beside
/// it are, a Pod's `/spec/nodeSelector` (2) alone is not: folding it saves nothing.
const FOLD_FROM_DEPTH: usize = 3;

/// The member holding the object's identity and the API server's bookkeeping (`managedFields`): never folded.
const METADATA: &str = "metadata";

/// `patch` as the JSON the webhook sends: the edits of each top-level member (but `metadata`) that reach
/// [`FOLD_FROM_DEPTH`] folded into one `replace` of that member, in the place of its first edit, written from
/// `request.object` of the review `body` as sent. `None` when nothing is folded or any step fails (no object, a
/// repeated member on an edited path, an edit that does not apply).
pub fn fold_deep_edits(patch: &Patch, body: &[u8]) -> Option<Vec<u8>> {
    let members = members_to_fold(patch)?;
    let edits: Vec<Option<Vec<String>>> = patch.0.iter().map(|operation| tokens_under(operation, &members)).collect();
    let mut paths = Paths::default();
    for tokens in edits.iter().flatten() {
        paths.open_along(&tokens[..tokens.len() - 1]);
    }
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let mut sent = ObjectSeed { fields: TO_OBJECT, paths: &paths }.deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    for (operation, tokens) in patch.0.iter().zip(&edits) {
        if let Some(tokens) = tokens {
            let (member, rest) = tokens.split_first()?;
            let (_, node) = sent.iter_mut().find(|(name, _)| name == member)?;
            apply(node, rest, operation)?;
        }
    }
    let mut bytes = Vec::with_capacity(body.len());
    bytes.push(b'[');
    let mut written: Vec<&str> = Vec::with_capacity(members.len());
    for (operation, tokens) in patch.0.iter().zip(&edits) {
        match tokens.as_ref().and_then(|tokens| tokens.first()) {
            Some(member) if written.contains(&member.as_str()) => continue,
            Some(member) => {
                let (name, node) = sent.iter().find(|(name, _)| name == member)?;
                separate(&mut bytes);
                bytes.extend_from_slice(br#"{"op":"replace","path":"#);
                serde_json::to_writer(&mut bytes, &PointerBuf::from_tokens([name.as_ref()]).to_string()).ok()?;
                bytes.extend_from_slice(br#","value":"#);
                node.write(&mut bytes).ok()?;
                bytes.push(b'}');
                written.push(name.as_ref());
            }
            None => {
                separate(&mut bytes);
                serde_json::to_writer(&mut bytes, operation).ok()?;
            }
        }
    }
    bytes.push(b']');
    Some(bytes)
}

/// A comma before every element of the patch array but the first.
fn separate(bytes: &mut Vec<u8>) {
    if bytes.last() != Some(&b'[') {
        bytes.push(b',');
    }
}

/// `request.object` of a review body as sent, as a Value, for checking a fold against the patch as built: `None`
/// where serde_json cannot hold it (the fold copies what no edit reaches as the bytes sent, which may hold a lone
/// surrogate escape that Go reads as U+FFFD). Like the fold, it reads nothing of the body outside the object.
pub fn object_as_sent(body: &[u8]) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Review<'a> {
        #[serde(borrow)]
        request: Request<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        #[serde(borrow)]
        object: &'a RawValue,
    }
    let review: Review<'_> = serde_json::from_slice(body).ok()?;
    serde_json::from_str(review.request.object.get()).ok()
}

/// The members worth folding: every edit under them is an add, replace or remove below the member itself, and
/// one reaches [`FOLD_FROM_DEPTH`]. `None` when there is none.
fn members_to_fold(patch: &Patch) -> Option<Vec<String>> {
    let mut deep: Vec<String> = Vec::new();
    let mut unfoldable: Vec<String> = Vec::new();
    for operation in &patch.0 {
        let member = first_token(operation)?;
        let depth = operation.path().tokens().count();
        let simple =
            matches!(operation, PatchOperation::Add(_) | PatchOperation::Replace(_) | PatchOperation::Remove(_));
        if member == METADATA || depth < 2 || !simple {
            unfoldable.push(member);
        } else if depth >= FOLD_FROM_DEPTH && !deep.contains(&member) {
            deep.push(member);
        }
    }
    deep.retain(|member| !unfoldable.contains(member));
    (!deep.is_empty()).then_some(deep)
}

/// The top-level member an operation edits (unescaped), `None` for the whole document.
fn first_token(operation: &PatchOperation) -> Option<String> {
    operation.path().tokens().next().map(|token| token.decoded().into_owned())
}

/// The unescaped tokens of an operation on one of `members` (the member first), `None` for any other.
fn tokens_under(operation: &PatchOperation, members: &[String]) -> Option<Vec<String>> {
    let tokens: Vec<String> = operation.path().tokens().map(|token| token.decoded().into_owned()).collect();
    members.contains(tokens.first()?).then_some(tokens)
}

/// The objects and arrays to split into their members while the body is read: the parents of every edit.
#[derive(Debug, Default)]
struct Paths<'p> {
    /// Split this value (an edit is made inside it).
    open: bool,
    /// Deeper values to split, by token (a member's name or an array index).
    inner: Vec<(&'p str, Paths<'p>)>,
}

impl<'p> Paths<'p> {
    /// Marks every value from here along `tokens` (inclusive of the last) as one to split.
    fn open_along(&mut self, tokens: &'p [String]) {
        let mut paths = self;
        for token in tokens {
            paths.open = true;
            let at = match paths.inner.iter().position(|(name, _)| name == token) {
                Some(at) => at,
                None => {
                    paths.inner.push((token.as_str(), Paths::default()));
                    paths.inner.len() - 1
                }
            };
            paths = &mut paths.inner[at].1;
        }
        paths.open = true;
    }

    fn inner(&self, token: &str) -> &Paths<'p> {
        const CLOSED: &Paths<'static> = &Paths { open: false, inner: Vec::new() };
        self.inner.iter().find(|(name, _)| *name == token).map_or(CLOSED, |(_, paths)| paths)
    }
}

/// A value of the object as sent, split only where an edit reaches into it.
#[derive(Debug)]
enum Node<'a> {
    /// Untouched: written back as the bytes the API server sent.
    Sent(&'a RawValue),
    /// An object's members, in the order sent (added members last).
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
    /// An array's elements.
    Array(Vec<Node<'a>>),
    /// A value from the patch.
    New(&'a Value),
}

impl<'a> Node<'a> {
    /// This value split into its members or elements, reading a sent one now if the body's pass did not.
    fn split(&mut self) -> Option<&mut Self> {
        match self {
            Self::Sent(raw) => {
                let open = Paths { open: true, inner: Vec::new() };
                let mut deserializer = serde_json::Deserializer::from_str(raw.get());
                *self = NodeSeed(&open).deserialize(&mut deserializer).ok()?;
            }
            Self::New(Value::Object(members)) => {
                *self = Self::Object(
                    members.iter().map(|(name, value)| (Cow::Borrowed(name.as_str()), Self::New(value))).collect(),
                );
            }
            Self::New(Value::Array(elements)) => *self = Self::Array(elements.iter().map(Self::New).collect()),
            Self::New(_) => return None,
            Self::Object(_) | Self::Array(_) => {}
        }
        Some(self)
    }

    fn write(&self, bytes: &mut Vec<u8>) -> serde_json::Result<()> {
        match self {
            Self::Sent(raw) => bytes.extend_from_slice(raw.get().as_bytes()),
            Self::New(value) => serde_json::to_writer(&mut *bytes, value)?,
            Self::Object(members) => {
                bytes.push(b'{');
                for (at, (name, node)) in members.iter().enumerate() {
                    if at > 0 {
                        bytes.push(b',');
                    }
                    serde_json::to_writer(&mut *bytes, name.as_ref())?;
                    bytes.push(b':');
                    node.write(bytes)?;
                }
                bytes.push(b'}');
            }
            Self::Array(elements) => {
                bytes.push(b'[');
                for (at, node) in elements.iter().enumerate() {
                    if at > 0 {
                        bytes.push(b',');
                    }
                    node.write(bytes)?;
                }
                bytes.push(b']');
            }
        }
        Ok(())
    }
}

/// Applies one add, replace or remove at `tokens` below `node`, as RFC 6902 does; `None` where it does not apply.
fn apply<'a>(node: &mut Node<'a>, tokens: &[String], operation: &'a PatchOperation) -> Option<()> {
    let (last, parents) = tokens.split_last()?;
    let mut node = node;
    for token in parents {
        node = match node.split()? {
            Node::Object(members) => members.iter_mut().find(|(name, _)| name == token).map(|(_, node)| node)?,
            Node::Array(elements) => elements.get_mut(array_index(token)?)?,
            Node::Sent(_) | Node::New(_) => return None,
        };
    }
    match (node.split()?, operation) {
        (Node::Object(members), PatchOperation::Add(add)) => match members.iter_mut().find(|(name, _)| name == last) {
            Some((_, node)) => *node = Node::New(&add.value),
            None => members.push((Cow::Owned(last.clone()), Node::New(&add.value))),
        },
        (Node::Object(members), PatchOperation::Replace(replace)) => {
            members.iter_mut().find(|(name, _)| name == last)?.1 = Node::New(&replace.value);
        }
        (Node::Object(members), PatchOperation::Remove(_)) => {
            let at = members.iter().position(|(name, _)| name == last)?;
            members.remove(at);
        }
        (Node::Array(elements), PatchOperation::Add(add)) if last == "-" => elements.push(Node::New(&add.value)),
        (Node::Array(elements), PatchOperation::Add(add)) => {
            let at = array_index(last).filter(|at| *at <= elements.len())?;
            elements.insert(at, Node::New(&add.value));
        }
        (Node::Array(elements), PatchOperation::Replace(replace)) => {
            *elements.get_mut(array_index(last)?)? = Node::New(&replace.value);
        }
        (Node::Array(elements), PatchOperation::Remove(_)) => {
            let at = array_index(last).filter(|at| *at < elements.len())?;
            elements.remove(at);
        }
        _ => return None,
    }
    Some(())
}

/// An array index as RFC 6901 writes it: `0`, or digits without a leading zero.
fn array_index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|byte| byte.is_ascii_digit());
    (digits && (token == "0" || !token.starts_with('0'))).then(|| token.parse().ok()).flatten()
}

/// A member name, borrowed from the body unless it had escapes.
struct Name<'a>(Cow<'a, str>);

impl<'de> de::Deserialize<'de> for Name<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = Name<'de>;
            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, name: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(name)))
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(name.to_owned())))
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

/// Reads one JSON object, keeping what `keep` returns for the members it wants and skipping the rest. A kept
/// member that repeats is an error: which copy the API server reads is not this module's to guess.
fn read_members<'de, A, T>(
    mut map: A,
    mut keep: impl FnMut(&str, &mut A) -> Result<Option<T>, A::Error>,
) -> Result<Vec<(Cow<'de, str>, T)>, A::Error>
where
    A: MapAccess<'de>,
{
    let mut kept: Vec<(Cow<'de, str>, T)> = Vec::new();
    while let Some(Name(name)) = map.next_key::<Name<'de>>()? {
        if let Some(value) = keep(&name, &mut map)? {
            if kept.iter().any(|(seen, _)| *seen == name) {
                return Err(de::Error::custom(format_args!("member {name:?} repeats")));
            }
            kept.push((name, value));
        }
    }
    Ok(kept)
}

/// The members of `request.object` named by the paths, each split along them.
type Members<'a> = Vec<(Cow<'a, str>, Node<'a>)>;

/// Reads a review body down `fields` (`request`, `object`), skipping every other member on the way, then the
/// object's members named by the paths.
struct ObjectSeed<'s, 'p> {
    fields: &'static [&'static str],
    paths: &'s Paths<'p>,
}

/// The path from a review body to its object.
const TO_OBJECT: &[&str] = &["request", "object"];

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_, '_> {
    type Value = Members<'de>;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Members<'de>, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_, '_> {
    type Value = Members<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("an AdmissionReview with request.object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Members<'de>, A::Error> {
        let paths = self.paths;
        let Some((field, fields)) = self.fields.split_first() else {
            return read_members(map, |name, map| match paths.inner(name) {
                inner if inner.open => map.next_value_seed(NodeSeed(inner)).map(Some),
                _ => map.next_value::<IgnoredAny>().map(|_| None),
            });
        };
        let kept = read_members(map, |name, map| {
            if name == *field {
                map.next_value_seed(ObjectSeed { fields, paths }).map(Some)
            } else {
                map.next_value::<IgnoredAny>().map(|_| None)
            }
        })?;
        Ok(kept.into_iter().next().map(|(_, members)| members).unwrap_or_default())
    }
}

/// Reads one value: split along the paths where they say so, kept as the bytes sent everywhere else.
struct NodeSeed<'s, 'p>(&'s Paths<'p>);

impl<'de> DeserializeSeed<'de> for NodeSeed<'_, '_> {
    type Value = Node<'de>;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Node<'de>, D::Error> {
        if !self.0.open {
            return <&RawValue as de::Deserialize>::deserialize(deserializer).map(Node::Sent);
        }
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NodeSeed<'_, '_> {
    type Value = Node<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("an object or array on an edited path")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Node<'de>, A::Error> {
        let paths = self.0;
        read_members(map, |name, map| map.next_value_seed(NodeSeed(paths.inner(name))).map(Some)).map(Node::Object)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node<'de>, A::Error> {
        let mut elements = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(node) = seq.next_element_seed(NodeSeed(self.0.inner(&elements.len().to_string())))? {
            elements.push(node);
        }
        Ok(Node::Array(elements))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn patch(operations: Value) -> Patch {
        serde_json::from_value(operations).unwrap()
    }

    fn body(object: &Value) -> Vec<u8> {
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                            "request": {"uid": "u", "oldObject": null, "object": object, "dryRun": false}});
        serde_json::to_vec(&review).unwrap()
    }

    /// The folded patch as the API server reads it.
    fn folded(patch: &Patch, object: &Value) -> Option<Patch> {
        fold_deep_edits(patch, &body(object)).map(|bytes| serde_json::from_slice(&bytes).unwrap())
    }

    fn applied(object: &Value, patch: &Patch) -> Value {
        let mut object = object.clone();
        json_patch::patch(&mut object, patch).unwrap();
        object
    }

    fn paths(patch: &Patch) -> Vec<String> {
        patch.0.iter().map(|operation| operation.path().to_string()).collect()
    }

    fn job() -> Value {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "labels": {"app": "a/b~c"}},
            "spec": {"suspend": false, "backoffLimit": 6, "completions": 1.5e3,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [
                         {"name": "main", "env": [{"name": "A", "value": "1"}],
                          "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}
        })
    }

    fn confining() -> Patch {
        patch(json!([
            {"op": "add", "path": "/metadata/annotations", "value": {"tiergate.io/tier": "bronze"}},
            {"op": "replace", "path": "/spec/suspend", "value": true},
            {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"gpu.nvidia.com/class": "l4"}},
            {"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": {"name": "B", "value": "2"}},
            {"op": "remove", "path": "/spec/backoffLimit"},
            {"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "tiergate-bronze"}
        ]))
    }

    #[test]
    fn deep_edits_of_spec_become_one_replace_with_the_same_result() {
        let folded = folded(&confining(), &job()).unwrap();
        assert_eq!(paths(&folded), ["/metadata/annotations", "/spec", "/metadata/labels/kueue.x-k8s.io~1queue-name"]);
        assert_eq!(applied(&job(), &folded), applied(&job(), &confining()));
    }

    #[test]
    fn what_no_edit_reaches_is_copied_as_sent() {
        // Numbers and escapes as the API server wrote them, not as serde_json would write them again.
        let sent = r#"{"request":{"object":{"spec":{"x":1.50e3,"y":"\u00e9","template":{"spec":{"a":[1,2]}}}}}}"#;
        let suspend = patch(json!([{"op": "add", "path": "/spec/template/spec/b", "value": true}]));
        let bytes = fold_deep_edits(&suspend, sent.as_bytes()).unwrap();
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            r#"[{"op":"replace","path":"/spec","value":{"x":1.50e3,"y":"\u00e9","template":{"spec":{"a":[1,2],"b":true}}}}]"#
        );
    }

    #[test]
    fn a_tenants_odd_member_content_comes_back_as_the_same_values() {
        // What a tenant controls inside the folded member: escaped keys, unicode, floats and integers at the
        // edges of what the API server encodes (a CRD keeps numbers as int64 or float64).
        let mut odd = job();
        odd["spec"]["template"]["metadata"] = json!({"annotations": {"a/b~c": "é\u{2028}\"", "": "empty"}});
        odd["spec"]["x"] = json!({"big": 9_223_372_036_854_775_807_i64, "neg": -9_223_372_036_854_775_808_i64,
                                  "float": 1.2345678901234567e19, "tiny": 5e-324, "zero": -0.0, "list": [[], {}]});
        let folded = folded(&confining(), &odd).unwrap();
        assert_eq!(applied(&odd, &folded), applied(&odd, &confining()));
        // An edit under an escaped member name, and one that adds such a member.
        let escaped = patch(json!([
            {"op": "add", "path": "/spec/template/metadata/annotations/a~1b~0c", "value": "new"},
            {"op": "add", "path": "/spec/template/metadata/annotations/x~1y", "value": "added"}
        ]));
        let folded = self::folded(&escaped, &odd).unwrap();
        assert_eq!(paths(&folded), ["/spec"]);
        assert_eq!(applied(&odd, &folded), applied(&odd, &escaped));
    }

    #[test]
    fn array_edits_insert_append_replace_and_remove_as_rfc_6902_does() {
        let mut object = job();
        object["spec"]["template"]["spec"]["tolerations"] = json!([{"key": "a"}, {"key": "b"}, {"key": "c"}]);
        let edits = patch(json!([
            {"op": "add", "path": "/spec/template/spec/tolerations/0", "value": {"key": "first"}},
            {"op": "add", "path": "/spec/template/spec/tolerations/-", "value": {"key": "last"}},
            // Indices after the insert: 2 is the sent "b", 3 the sent "c".
            {"op": "replace", "path": "/spec/template/spec/tolerations/2/key", "value": "B"},
            {"op": "remove", "path": "/spec/template/spec/tolerations/3"},
            {"op": "add", "path": "/spec/template/spec/containers/0/env/1", "value": {"name": "Z"}}
        ]));
        let folded = folded(&edits, &object).unwrap();
        assert_eq!(paths(&folded), ["/spec"]);
        assert_eq!(applied(&object, &folded), applied(&object, &edits));
    }

    #[test]
    fn an_edit_inside_a_value_the_patch_added_is_folded_too() {
        let edits = patch(json!([
            {"op": "add", "path": "/spec/template/spec/affinity", "value": {"nodeAffinity": {"a": [1]}}},
            {"op": "add", "path": "/spec/template/spec/affinity/nodeAffinity/b", "value": 2},
            {"op": "add", "path": "/spec/template/spec/affinity/nodeAffinity/a/-", "value": 3}
        ]));
        let folded = folded(&edits, &job()).unwrap();
        assert_eq!(applied(&job(), &folded), applied(&job(), &edits));
    }

    #[test]
    fn shallow_edits_and_metadata_are_left_as_built() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        let shallow = patch(json!([
            {"op": "add", "path": "/spec/nodeSelector", "value": {"gpu.nvidia.com/class": "l4"}},
            {"op": "add", "path": "/metadata/annotations/x", "value": "y"}
        ]));
        assert!(folded(&shallow, &pod).is_none());
        let metadata_only = patch(json!([{"op": "add", "path": "/metadata/labels/a~1b", "value": "c"}]));
        assert!(folded(&metadata_only, &job()).is_none());
    }

    #[test]
    fn a_member_edited_as_a_whole_or_missing_is_not_folded() {
        let whole = patch(json!([
            {"op": "add", "path": "/spec", "value": {}},
            {"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {}}
        ]));
        assert!(folded(&whole, &job()).is_none());
        let missing = patch(json!([{"op": "add", "path": "/status/a/b", "value": 1}]));
        assert!(folded(&missing, &job()).is_none());
    }

    #[test]
    fn an_edit_that_does_not_apply_keeps_the_patch_as_built() {
        for broken in [
            json!([{"op": "replace", "path": "/spec/template/nope/x", "value": 1}]),
            json!([{"op": "replace", "path": "/spec/template/spec/missing", "value": 1}]),
            json!([{"op": "remove", "path": "/spec/template/spec/containers/1"}]),
            json!([{"op": "add", "path": "/spec/template/spec/containers/01", "value": {}}]),
            json!([{"op": "add", "path": "/spec/template/spec/containers/2", "value": {}}]),
            json!([{"op": "add", "path": "/spec/template/spec/restartPolicy/x", "value": 1}]),
        ] {
            assert!(folded(&patch(broken.clone()), &job()).is_none(), "{broken}");
            assert!(json_patch::patch(&mut job(), &patch(broken.clone())).is_err(), "{broken}");
        }
    }

    #[test]
    fn a_repeated_member_on_an_edited_path_or_no_object_keeps_the_patch_as_built() {
        let edit = patch(json!([{"op": "add", "path": "/spec/template/x", "value": 1}]));
        for sent in [
            r#"{"request":{"object":{"spec":{"template":{},"template":{}}}}}"#,
            r#"{"request":{"object":{"spec":{"template":{},"a":1,"a":2}}}}"#,
            r#"{"request":{"object":{"spec":{"template":{}},"spec":{"template":{}}}}}"#,
            r#"{"request":{"object":{"spec":{"template":{}}},"object":{"spec":{"template":{}}}}}"#,
            r#"{"request":{"uid":"u"}}"#,
            r#"{"request":{"object":null}}"#,
            r#"{"request":{"object":{"spec":{"template":{}}}}} trailing"#,
        ] {
            assert!(fold_deep_edits(&edit, sent.as_bytes()).is_none(), "{sent}");
        }
        // A repeated member outside the folded ones is not read at all.
        let sent = r#"{"request":{"object":{"spec":{"template":{}},"kind":"A","kind":"B"},"uid":"u","uid":"v"}}"#;
        assert!(fold_deep_edits(&edit, sent.as_bytes()).is_some());
    }
}
