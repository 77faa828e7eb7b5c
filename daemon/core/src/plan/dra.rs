//! GPU classes found through Dynamic Resource Allocation: the DeviceClass tiergate renders per DRA class and the
//! `deviceClassMappings` Kueue needs to charge claims of those classes; pure, no I/O.
//!
//! A class's DeviceClass (`<class>.tiergate.io`) selects the driver's devices and the class's own selector, ANDed.
//! Kueue charges a claim's devices to the logical resource its Configuration maps the DeviceClass to; tiergate maps
//! every DRA class to the class's whole-GPU resource (`nvidia.com/gpu` by default), so a tier's quota of that
//! resource is one cap over extended-resource and DRA GPUs of its flavors alike. Kueue picks the flavor by the
//! pod's node selection (the webhook pins the class's node labels), never by the DeviceClass, which is why a DRA
//! class without node labels may not share a tier with another flavor (validation). docs/guides/dra.md "DRA".

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{CELDeviceSelector, DeviceClass, DeviceClassSpec, DeviceSelector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

pub use crate::policy::allowed_device_classes;
use crate::policy::{GpuClass, TierPolicySpec};

/// Most mappings Kueue's Configuration accepts (`resources.deviceClassMappings`, v0.19 validation).
pub const MAX_KUEUE_MAPPINGS: usize = 16;
/// Most DeviceClasses one Kueue mapping accepts.
pub const MAX_DEVICE_CLASSES_PER_MAPPING: usize = 8;

/// One entry of Kueue's `resources.deviceClassMappings`: the DeviceClasses whose devices count as `name`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DeviceClassMapping {
    /// The logical resource ClusterQueues cover (the classes' whole-GPU resource).
    pub name: String,
    /// The DeviceClasses counted as `name`, in policy order.
    pub device_class_names: Vec<String>,
}

/// The CEL expression selecting the devices of `driver`.
pub fn driver_expression(driver: &str) -> String {
    format!("device.driver == {}", cel_string(driver))
}

/// The DeviceClass of `class` (`None` without `dra`), labelled with `labels`.
pub fn build_device_class(class: &GpuClass, labels: &BTreeMap<String, String>) -> Option<DeviceClass> {
    let dra = class.dra.as_ref()?;
    let cel = |expression: String| DeviceSelector { cel: Some(CELDeviceSelector { expression }) };
    let mut selectors = vec![cel(driver_expression(&dra.driver))];
    selectors.extend(dra.selector.as_ref().map(|selector| cel(selector.trim().to_owned())));
    Some(DeviceClass {
        metadata: ObjectMeta { name: class.device_class_name(), labels: Some(labels.clone()), ..ObjectMeta::default() },
        spec: Some(DeviceClassSpec { selectors: Some(selectors), ..DeviceClassSpec::default() }),
    })
}

/// The DeviceClasses of every DRA class of `classes`, in order.
pub fn build_device_classes<'a>(
    classes: impl IntoIterator<Item = &'a GpuClass>,
    labels: &BTreeMap<String, String>,
) -> Vec<DeviceClass> {
    classes.into_iter().filter_map(|class| build_device_class(class, labels)).collect()
}

/// The `deviceClassMappings` Kueue needs for `spec`: one per distinct whole-GPU resource of the DRA classes (first
/// use order), naming their DeviceClasses. Empty when no class has `dra`.
pub fn kueue_device_class_mappings(spec: &TierPolicySpec) -> Vec<DeviceClassMapping> {
    let mut mappings: Vec<DeviceClassMapping> = Vec::new();
    for class in &spec.gpu_classes {
        let Some(device_class) = class.device_class_name() else { continue };
        let resource = class.primary_resource();
        match mappings.iter_mut().find(|mapping| mapping.name == resource) {
            Some(mapping) => mapping.device_class_names.push(device_class),
            None => {
                mappings.push(DeviceClassMapping { name: resource.to_owned(), device_class_names: vec![device_class] })
            }
        }
    }
    mappings
}

/// The fragment of Kueue's Configuration (the `controller_manager_config.yaml` key of `kueue-manager-config`) that
/// `mappings` need, as YAML with a comment saying where it goes; `None` without mappings.
pub fn kueue_configuration_fragment(mappings: &[DeviceClassMapping]) -> Option<String> {
    if mappings.is_empty() {
        return None;
    }
    let mut text = String::from(
        "# Kueue's Configuration (ConfigMap kueue-manager-config, key controller_manager_config.yaml):\n\
         # merge into `resources`, then restart Kueue. tiergate cannot edit it; `tiergate check --kubeconfig` compares it.\n\
         resources:\n  deviceClassMappings:\n",
    );
    for mapping in mappings {
        text.push_str(&format!("    - name: {}\n      deviceClassNames:\n", mapping.name));
        for class in &mapping.device_class_names {
            text.push_str(&format!("        - {class}\n"));
        }
    }
    Some(text)
}

/// How the live Kueue Configuration's mappings differ from what the policy needs: one line per DeviceClass that is
/// unmapped or mapped to another resource (empty: Kueue charges every DRA class as the policy says). Extra
/// mappings of other DeviceClasses are Kueue's business and not reported.
pub fn mapping_differences(needed: &[DeviceClassMapping], live: &[DeviceClassMapping]) -> Vec<String> {
    let mut differences = Vec::new();
    for mapping in needed {
        for class in &mapping.device_class_names {
            let live_names: Vec<&str> = live
                .iter()
                .filter(|entry| entry.device_class_names.iter().any(|name| name == class))
                .map(|entry| entry.name.as_str())
                .collect();
            match live_names.as_slice() {
                [] => differences.push(format!(
                    "DeviceClass {class} is not in Kueue's deviceClassMappings (needed: counted as {})",
                    mapping.name
                )),
                [name] if *name == mapping.name => {}
                names => differences.push(format!(
                    "DeviceClass {class} is counted as {} by Kueue, the policy needs {}",
                    names.join(", "),
                    mapping.name
                )),
            }
        }
    }
    differences
}

/// Reads Kueue's mappings out of its Configuration document (`controller_manager_config.yaml`): `Ok(empty)` when
/// it has none, `Err` with the YAML problem when it does not parse.
pub fn parse_kueue_mappings(configuration: &str) -> Result<Vec<DeviceClassMapping>, String> {
    #[derive(Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    struct Resources {
        #[serde(default)]
        device_class_mappings: Vec<DeviceClassMapping>,
    }
    #[derive(Deserialize, Default)]
    struct Configuration {
        #[serde(default)]
        resources: Option<Resources>,
    }
    let parsed: Configuration = serde_saphyr::from_str(configuration).map_err(|error| error.to_string())?;
    Ok(parsed.resources.map(|resources| resources.device_class_mappings).unwrap_or_default())
}

/// `text` as a CEL string literal (double-quoted, backslash and quote escaped).
fn cel_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::parse_policy;

    fn sample() -> TierPolicySpec {
        let text = include_str!("../../../../samples/dra/policy.yaml");
        parse_policy(text, "samples/dra/policy.yaml").expect("sample parses").spec
    }

    #[test]
    fn every_dra_class_gets_a_device_class_selecting_its_driver_and_its_selector() {
        let spec = sample();
        let classes = build_device_classes(&spec.gpu_classes, &BTreeMap::new());
        let names: Vec<_> = classes.iter().map(|class| class.metadata.name.clone().unwrap_or_default()).collect();
        assert_eq!(names, ["h100.tiergate.io", "l4.tiergate.io"]);
        let expressions: Vec<String> = classes[1]
            .spec
            .as_ref()
            .and_then(|spec| spec.selectors.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|selector| selector.cel.as_ref().map(|cel| cel.expression.clone()))
            .collect();
        assert_eq!(
            expressions,
            [
                "device.driver == \"gpu.nvidia.com\"",
                "device.attributes[\"gpu.nvidia.com\"].productName == \"NVIDIA L4\""
            ]
        );
    }

    #[test]
    fn classes_of_one_resource_share_one_mapping() {
        let mappings = kueue_device_class_mappings(&sample());
        assert_eq!(
            mappings,
            [DeviceClassMapping {
                name: "nvidia.com/gpu".to_owned(),
                device_class_names: vec!["h100.tiergate.io".to_owned(), "l4.tiergate.io".to_owned()],
            }]
        );
        let fragment = kueue_configuration_fragment(&mappings).expect("a fragment");
        assert!(fragment.contains("- name: nvidia.com/gpu") && fragment.contains("- l4.tiergate.io"), "{fragment}");
        let round_trip = parse_kueue_mappings(&fragment).expect("the fragment parses as a Configuration");
        assert_eq!(round_trip, mappings);
    }

    #[test]
    fn differences_name_each_unmapped_or_remapped_device_class() {
        let needed = kueue_device_class_mappings(&sample());
        assert!(mapping_differences(&needed, &needed).is_empty());
        let live = [DeviceClassMapping {
            name: "example.com/dra-gpu".to_owned(),
            device_class_names: vec!["h100.tiergate.io".to_owned()],
        }];
        let differences = mapping_differences(&needed, &live);
        assert_eq!(differences.len(), 2, "{differences:?}");
        assert!(differences[0].contains("counted as example.com/dra-gpu by Kueue"), "{differences:?}");
        assert!(differences[1].contains("l4.tiergate.io is not in Kueue's deviceClassMappings"), "{differences:?}");
        assert!(
            parse_kueue_mappings("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n")
                .expect("parses")
                .is_empty()
        );
        assert!(parse_kueue_mappings("resources: [").is_err());
    }
}
