//! Seed 002 GPU pinning: a StatefulSet pod whose template carries `gpu-scheduling-map` is pinned to its
//! ordinal's node and GPUs; the map is checked when the StatefulSet is admitted; pure, no I/O.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;
use tiergate_compat::gpu_map::{GPU_SCHEDULING_MAP_ANNOTATION, GpuMap, GpuMapError, parse_gpu_scheduling_map};

use super::owner::ordinal;
use super::{GpuPinning, PlacementError};

/// The environment variable pinning sets in every container.
pub const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";

fn parsed(value: &str) -> Result<GpuMap, PlacementError> {
    parse_gpu_scheduling_map(value).map_err(|error| PlacementError {
        annotation: GPU_SCHEDULING_MAP_ANNOTATION.to_owned(),
        message: match error {
            GpuMapError::ParseEmptyMap => {
                "it has no entries; write one ORDINAL=NODE:GPU[,GPU...] per line, e.g. `0=node1:0,1`".to_owned()
            }
            GpuMapError::ParseLine { line, text, detail } => format!("line {line} `{text}`: {detail}"),
        },
    })
}

/// Checks an owner's template map: malformed is an error naming the line; a StatefulSet with more replicas than
/// mapped ordinals, or a map on a kind without ordinals, gets a warning.
pub(crate) fn check_owner_map(
    kind: &str,
    annotations: &BTreeMap<String, String>,
    replicas: Option<i64>,
    warnings: &mut Vec<String>,
) -> Result<(), PlacementError> {
    let Some(value) = annotations.get(GPU_SCHEDULING_MAP_ANNOTATION) else {
        return Ok(());
    };
    if kind != "StatefulSet" {
        warnings.push(format!(
            "{GPU_SCHEDULING_MAP_ANNOTATION} is ignored on a {kind}: only StatefulSet pods have ordinals; use a \
             StatefulSet or remove the annotation"
        ));
        return Ok(());
    }
    let map = parsed(value)?;
    let unmapped: Vec<String> = (0..replicas.unwrap_or(1).max(0))
        .filter_map(|ordinal| u32::try_from(ordinal).ok())
        .filter(|ordinal| !map.entries.contains_key(ordinal))
        .map(|ordinal| ordinal.to_string())
        .collect();
    if !unmapped.is_empty() {
        warnings.push(format!(
            "{GPU_SCHEDULING_MAP_ANNOTATION} has no line for ordinal(s) {}; those pods will run unpinned — add \
             ORDINAL=NODE:GPU lines for them",
            unmapped.join(", ")
        ));
    }
    Ok(())
}

/// The pinning of a pod carrying a map, or `None` with a warning when the map is malformed, the pod has no
/// ordinal, or its ordinal is not mapped. A container that already sets `CUDA_VISIBLE_DEVICES` to another value
/// keeps it, with a warning.
pub(crate) fn pod_pinning(
    annotations: &BTreeMap<String, String>,
    meta: &ObjectMeta,
    pod: &Value,
    warnings: &mut Vec<String>,
) -> Option<GpuPinning> {
    let value = annotations.get(GPU_SCHEDULING_MAP_ANNOTATION)?;
    let map = match parsed(value) {
        Ok(map) => map,
        Err(error) => {
            warnings.push(format!("admitted without GPU pinning: {error}"));
            return None;
        }
    };
    let Some(ordinal) = ordinal(meta) else {
        warnings.push(format!(
            "{GPU_SCHEDULING_MAP_ANNOTATION} is ignored: this pod has no StatefulSet ordinal; put the map on a \
             StatefulSet's pod template"
        ));
        return None;
    };
    let Some(pin) = map.entries.get(&ordinal) else {
        let mapped: Vec<String> = map.entries.keys().map(u32::to_string).collect();
        warnings.push(format!(
            "admitted without GPU pinning: ordinal {ordinal} is not in {GPU_SCHEDULING_MAP_ANNOTATION} (mapped: {}); \
             add a line `{ordinal}=NODE:GPU`",
            mapped.join(", ")
        ));
        return None;
    };
    let pinning = GpuPinning { node: pin.node.clone(), cuda_visible_devices: pin.cuda_visible_devices() };
    for (container, user_value) in user_cuda_values(pod) {
        if user_value != pinning.cuda_visible_devices {
            warnings.push(format!(
                "container {container} keeps its own {CUDA_VISIBLE_DEVICES}={user_value}; the map gives \
                 {}; remove the env var to use the map",
                pinning.cuda_visible_devices
            ));
        }
    }
    Some(pinning)
}

/// (container name, value) of every container and init container that sets `CUDA_VISIBLE_DEVICES` itself.
fn user_cuda_values(pod: &Value) -> Vec<(String, String)> {
    ["initContainers", "containers"]
        .iter()
        .filter_map(|field| pod["spec"][field].as_array())
        .flatten()
        .filter_map(|container| {
            let env = container["env"].as_array()?;
            let entry = env.iter().find(|entry| entry["name"] == CUDA_VISIBLE_DEVICES)?;
            let value = entry["value"].as_str().unwrap_or("(from valueFrom)");
            Some((container["name"].as_str().unwrap_or_default().to_owned(), value.to_owned()))
        })
        .collect()
}
