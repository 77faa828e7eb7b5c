//! The lean view of a review body: the envelope read in one typed pass, each object read where it stands, once,
//! into the JSON the rules borrow (`crate::request`), without what no rule reads (`metadata.managedFields` and
//! the other unread metadata of `request::UNREAD_METADATA`, every `env` entry but the first
//! `CUDA_VISIBLE_DEVICES`, reduced to its name and value), those parts skipped without being built; pure, no I/O.
//!
//! Every other field is kept, so each rule (GPU routes, owners, UPDATE checks on `oldObject`, adapters' pointers)
//! reads the same values as in the full object. The patch is built against this view (`admission::patch`): the
//! only pruned arrays, `env`, are only ever appended to, which the patch writes as `/-` so the full object's
//! entries stay where they are.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use kube_core::admission::Operation;
use kube_core::{GroupVersionKind, TypeMeta};
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};

use crate::placement::CUDA_VISIBLE_DEVICES;
use crate::request::{Request, UNREAD_METADATA};

/// The field holding a container's environment: the one array the lean view prunes.
pub(super) const PRUNED_ARRAY_KEY: &str = "env";

/// The members of a JSON object, each borrowed from the body as raw JSON; a repeated member keeps its last
/// value, as Go's decoder (and the API server) does.
type Members<'a> = HashMap<Cow<'a, str>, &'a RawValue>;

/// The review in one typed pass (the common case): a repeated member makes it fail, and the review is then read
/// member by member, the last value of each kept.
#[derive(Deserialize)]
struct Review<'a> {
    #[serde(rename = "apiVersion", borrow)]
    api_version: Cow<'a, str>,
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    request: Option<TypedRequest<'a>>,
}

/// A request with its objects read lean in the same pass (`by_member` reads them apart and leaves them out here).
/// `resource`, `requestKind`, `requestResource`, `requestSubResource` and `options` are read for their shape only,
/// borrowed from the body and not kept (a review without `resource` is malformed): no rule depends on them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypedRequest<'a> {
    uid: String,
    kind: GroupVersionKind,
    #[serde(rename = "resource", borrow)]
    _resource: GroupVersionShape<'a>,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default, rename = "requestKind", borrow)]
    _request_kind: Option<GroupVersionShape<'a>>,
    #[serde(default, rename = "requestResource", borrow)]
    _request_resource: Option<GroupVersionShape<'a>>,
    #[serde(default, rename = "requestSubResource", borrow)]
    _request_sub_resource: Option<Cow<'a, str>>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    user_info: k8s_openapi::api::authentication::v1::UserInfo,
    #[serde(default, deserialize_with = "lean_object_member")]
    object: Option<Value>,
    #[serde(default, deserialize_with = "lean_object_member")]
    old_object: Option<Value>,
    #[serde(default)]
    dry_run: bool,
    /// Any JSON value, as kube-core's `RawExtension` takes it.
    #[serde(default, rename = "options")]
    _options: Option<IgnoredAny>,
}

/// The shape of kube-core's `GroupVersionKind` (`requestKind`) and `GroupVersionResource` (`resource`,
/// `requestResource`): `group`, `version` and a `kind` or `resource` string (and an optional `apiVersion`),
/// checked borrowed without building them. No rule reads these members; the API server always sends them whole.
#[derive(Deserialize)]
struct GroupVersionShape<'a> {
    #[serde(rename = "group", borrow)]
    _group: Cow<'a, str>,
    #[serde(rename = "version", borrow)]
    _version: Cow<'a, str>,
    #[serde(rename = "kind", alias = "resource", borrow)]
    _name: Cow<'a, str>,
    #[serde(default, rename = "apiVersion", borrow)]
    _api_version: Cow<'a, str>,
}

/// What reading the lean envelope found wrong.
#[derive(Debug)]
pub enum LeanError {
    /// Not the review's JSON shape (a field of the wrong type, a missing `uid`, ...).
    Json(serde_json::Error),
    /// Another apiVersion or kind than `admission.k8s.io/v1` `AdmissionReview` (found, found).
    Version(String, String),
    /// No `request`.
    NoRequest,
}

/// Reads `body` as an AdmissionReview `api_version` request with lean objects.
pub fn lean_request(body: &[u8], api_version: &str) -> Result<Request, LeanError> {
    if let Ok(review) = serde_json::from_slice::<Review<'_>>(body)
        && review.api_version == api_version
        && review.kind == "AdmissionReview"
        && let Some(request) = review.request
    {
        let types = TypeMeta { api_version: review.api_version.into_owned(), kind: review.kind.into_owned() };
        return Ok(request.into_request(types));
    }
    by_member(body, api_version)
}

/// `lean_request` for a review with repeated members (or one to explain): read member by member.
fn by_member(body: &[u8], api_version: &str) -> Result<Request, LeanError> {
    let top: Members<'_> = serde_json::from_slice(body).map_err(LeanError::Json)?;
    let text = |name: &str| {
        top.get(name).and_then(|raw| serde_json::from_str::<Cow<'_, str>>(raw.get()).ok()).unwrap_or_default()
    };
    let (found_version, found_kind) = (text("apiVersion"), text("kind"));
    if found_version != api_version || found_kind != "AdmissionReview" {
        return Err(LeanError::Version(found_version.into_owned(), found_kind.into_owned()));
    }
    let request = top.get("request").filter(|raw| raw.get() != "null").ok_or(LeanError::NoRequest)?;
    let members: Members<'_> = serde_json::from_str(request.get()).map_err(LeanError::Json)?;
    let object = |name: &str| members.get(name).map_or(Ok(None), |raw| lean_object(raw));
    let (object, old_object) =
        (object("object").map_err(LeanError::Json)?, object("oldObject").map_err(LeanError::Json)?);
    let small = members
        .iter()
        .filter(|(name, _)| !matches!(name.as_ref(), "object" | "oldObject"))
        .map(|(name, raw)| Ok((name.to_string(), serde_json::from_str::<Value>(raw.get())?)))
        .collect::<Result<Map<String, Value>, serde_json::Error>>()
        .map_err(LeanError::Json)?;
    let small = Value::Object(small);
    let mut request = TypedRequest::deserialize(&small).map_err(LeanError::Json)?;
    (request.object, request.old_object) = (object, old_object);
    Ok(request.into_request(TypeMeta { api_version: found_version.into_owned(), kind: found_kind.into_owned() }))
}

impl TypedRequest<'_> {
    /// The request of a review of `types`.
    fn into_request(self, types: TypeMeta) -> Request {
        Request {
            types,
            uid: self.uid,
            kind: self.kind,
            sub_resource: self.sub_resource,
            name: self.name,
            namespace: self.namespace,
            operation: self.operation,
            user_info: self.user_info,
            dry_run: self.dry_run,
            object: self.object,
            old_object: self.old_object,
        }
    }
}

/// `object` or `oldObject` of the typed pass, read lean where it stands in the body (`null` is none).
fn lean_object_member<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    deserializer.deserialize_any(ObjectVisitor)
}

/// The JSON scalars as `serde_json` builds them (numbers, strings, booleans, null), for the lean visitors.
macro_rules! visit_json_scalars {
    () => {
        fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
            Ok(Value::Bool(value))
        }

        fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
            Ok(Value::Number(value.into()))
        }

        fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
            Ok(Value::Number(value.into()))
        }

        fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
            Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
        }

        fn visit_str<E>(self, value: &str) -> Result<Value, E> {
            Ok(Value::String(value.to_owned()))
        }

        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
    };
}

/// An object read in one pass: `metadata` as JSON without its unread fields (skipped unbuilt), every other member
/// built lean. A repeated member keeps its last value, as Go does.
struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Option<Value>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a Kubernetes object or null")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let value = match key.as_ref() {
                "metadata" => map.next_value_seed(MetadataSeed)?,
                PRUNED_ARRAY_KEY => map.next_value_seed(EnvSeed)?,
                _ => map.next_value_seed(LeanSeed)?,
            };
            object.insert(key.into_owned(), value);
        }
        Ok(Some(Value::Object(object)))
    }
}

/// An object's `metadata` as JSON, the unread fields (`UNREAD_METADATA`) skipped without being built; every other
/// member kept whole (no `env` pruning here: metadata holds none). A shape other than a map is kept as it is.
struct MetadataSeed;

impl<'de> DeserializeSeed<'de> for MetadataSeed {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetadataSeed {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("object metadata")
    }

    visit_json_scalars!();

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        LeanSeed.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut metadata = Map::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if UNREAD_METADATA.contains(&key.as_ref()) {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            metadata.insert(key.into_owned(), map.next_value::<Value>()?);
        }
        Ok(Value::Object(metadata))
    }
}

/// One object of the review (`by_member`: borrowed from the body as raw JSON) as its lean view; `null` is none.
fn lean_object(raw: &RawValue) -> Result<Option<Value>, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(raw.get());
    let object = lean_object_member(&mut deserializer)?;
    deserializer.end()?;
    Ok(object)
}

/// Builds a `Value` like serde_json's own visitor, leaving out what the lean view prunes (below an object's top
/// level, which `ObjectVisitor` reads).
struct LeanSeed;

impl<'de> DeserializeSeed<'de> for LeanSeed {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for LeanSeed {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    visit_json_scalars!();

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element_seed(LeanSeed)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let value = match key.as_ref() {
                PRUNED_ARRAY_KEY => map.next_value_seed(EnvSeed)?,
                _ => map.next_value_seed(LeanSeed)?,
            };
            object.insert(key.into_owned(), value);
        }
        Ok(Value::Object(object))
    }
}

/// An `env` list: kept as a list holding only its first `CUDA_VISIBLE_DEVICES` entry, as its name and string
/// value (what pinning reads: whether the container sets it, and to what); every other entry is skipped without
/// being built. Another shape than a list is kept whole.
struct EnvSeed;

impl<'de> DeserializeSeed<'de> for EnvSeed {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EnvSeed {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a list of environment variables")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut kept = Vec::new();
        while let Some(entry) = seq.next_element::<&'de RawValue>()? {
            if kept.is_empty()
                && let Some(entry) = cuda_entry(entry)
            {
                kept.push(entry);
            }
        }
        Ok(Value::Array(kept))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        LeanSeed.visit_map(map)
    }

    visit_json_scalars!();
}

/// `{"name": "CUDA_VISIBLE_DEVICES", "value": …}` when `entry` sets it (its value only when a string); `None` for
/// any other entry, read borrowed from the body.
fn cuda_entry(entry: &RawValue) -> Option<Value> {
    #[derive(Deserialize)]
    struct Entry<'a> {
        #[serde(borrow)]
        name: Cow<'a, str>,
        #[serde(default, borrow)]
        value: Option<&'a RawValue>,
    }
    let Entry { name, value } = serde_json::from_str::<Entry<'_>>(entry.get()).ok()?;
    if name != CUDA_VISIBLE_DEVICES {
        return None;
    }
    let mut kept = Map::new();
    kept.insert("name".to_owned(), Value::String(name.into_owned()));
    if let Some(value) = value.and_then(|value| serde_json::from_str::<String>(value.get()).ok()) {
        kept.insert("value".to_owned(), Value::String(value));
    }
    Some(Value::Object(kept))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn review(object: &str) -> Vec<u8> {
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u",
            "kind":{{"group":"batch","version":"v1","kind":"Job"}},
            "resource":{{"group":"batch","version":"v1","resource":"jobs"}},"operation":"CREATE",
            "userInfo":{{"username":"alice"}},"object":{object}}}}}"#
        )
        .into_bytes()
    }

    /// The lean view of `object` as the request carries it.
    fn lean(object: &Value) -> Value {
        lean_request(&review(&object.to_string()), "admission.k8s.io/v1").unwrap().object.unwrap()
    }

    #[test]
    fn managed_fields_and_ordinary_env_entries_are_left_out_and_everything_else_kept() {
        let object = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "managedFields": [{"manager": "kubectl"}], "labels": {"a": "b"},
                "uid": "1", "resourceVersion": "7", "generation": 2, "creationTimestamp": "2026-11-24T00:00:00Z",
                "deletionTimestamp": "2026-11-24T00:00:01Z", "finalizers": ["f"]},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "args": ["x"],
                "env": [{"name": "A", "value": "1"}, {"name": "CUDA_VISIBLE_DEVICES", "value": "0"},
                        {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}});
        let mut expected = object.clone();
        for unread in ["managedFields", "uid", "resourceVersion", "generation", "creationTimestamp"] {
            expected["metadata"].as_object_mut().unwrap().remove(unread);
        }
        expected["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]);
        let twice = json!({"metadata": {"name": "t"}, "env": [{"name": "CUDA_VISIBLE_DEVICES", "valueFrom": {"x": 1}},
            {"name": "CUDA_VISIBLE_DEVICES", "value": "1"}, "plain", {"value": "no name"}]});
        assert_eq!(lean(&twice), json!({"metadata": {"name": "t"}, "env": [{"name": "CUDA_VISIBLE_DEVICES"}]}));
        assert_eq!(lean(&object), expected);
    }

    #[test]
    fn managed_fields_are_kept_below_the_top_metadata_and_an_env_that_is_not_a_list_is_kept_whole() {
        let object = json!({"metadata": {"name": "j"}, "spec": {"template": {"metadata": {"managedFields": [1]}},
            "env": {"not": "a list"}}});
        assert_eq!(lean(&object), object);
    }

    #[test]
    fn the_lean_object_is_the_pruned_object_in_both_readings() {
        let object = r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"j","namespace":"n",
            "managedFields":[{"manager":"kubectl","fieldsV1":{"f:spec":{}}}],"labels":{"a":"b"},
            "ownerReferences":[{"apiVersion":"v1","kind":"X","name":"o","uid":"1"}]},
            "spec":{"template":{"spec":{"containers":[{"name":"c","env":[{"name":"A","value":"1"}]}]}}}}"#;
        let expected = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": "n", "labels": {"a": "b"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "1"}]},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "env": []}]}}}});
        let typed = lean_request(&review(object), "admission.k8s.io/v1").unwrap();
        assert_eq!(typed.object.unwrap(), expected);
        // A repeated request member makes the typed pass fail: the review is read member by member.
        let repeated =
            String::from_utf8(review(object)).unwrap().replacen(r#""uid":"u","#, r#""uid":"x","uid":"u","#, 1);
        let by_member = lean_request(repeated.as_bytes(), "admission.k8s.io/v1").unwrap();
        assert_eq!(by_member.uid, "u");
        assert_eq!(by_member.object.unwrap(), expected);
    }

    #[test]
    fn a_repeated_member_inside_metadata_keeps_its_last_value() {
        let object = r#"{"metadata":{"name":"first","managedFields":[],"name":"last"},"spec":{}}"#;
        let request = lean_request(&review(object), "admission.k8s.io/v1").unwrap();
        assert_eq!(request.object.unwrap()["metadata"], json!({"name": "last"}));
    }

    #[test]
    fn the_shape_only_members_are_still_checked_though_not_kept() {
        let body = String::from_utf8(review(r#"{"metadata":{"name":"j"}}"#)).unwrap();
        let with =
            |member: &str| body.replacen(r#""operation":"CREATE","#, &format!(r#""operation":"CREATE",{member},"#), 1);
        let read = |body: &str| lean_request(body.as_bytes(), "admission.k8s.io/v1");
        assert!(read(&with(r#""options":{"kind":"CreateOptions","fieldManager":"kubectl"}"#)).is_ok());
        assert!(read(&with(r#""requestKind":{"group":"batch","version":"v1","kind":"Job"}"#)).is_ok());
        for malformed in [
            r#""requestKind":{"group":"batch","version":"v1","kind":7}"#,
            r#""requestResource":{"group":"batch","resource":"jobs"}"#,
            r#""requestSubResource":["status"]"#,
        ] {
            assert!(matches!(read(&with(malformed)), Err(LeanError::Json(_))), "{malformed}");
        }
        let without_resource =
            body.replacen(r#""resource":{"group":"batch","version":"v1","resource":"jobs"},"#, "", 1);
        assert!(matches!(read(&without_resource), Err(LeanError::Json(_))));
    }

    #[test]
    fn a_review_of_another_kind_is_named() {
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"Other","request":{}}"#;
        assert!(
            matches!(lean_request(body, "admission.k8s.io/v1"), Err(LeanError::Version(_, kind)) if kind == "Other")
        );
    }
}
