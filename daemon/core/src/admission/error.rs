//! The error every step of the admission decision can fail with (tier classes, tolerations, template edits);
//! owned here so the steps and `mutate` share it without importing each other. No I/O.

use super::patch::PatchError;
use super::podspec::ShapeError;

/// tiergate failed while building the mutation (the object does not have the shape its kind promises).
#[derive(Debug, thiserror::Error)]
pub enum MutateError {
    /// A field to edit had the wrong JSON type.
    #[error("failed to edit {pointer}: {source}")]
    EditField {
        /// Pointer of the template or metadata being edited.
        pointer: String,
        /// What was wrong.
        source: ShapeError,
    },
    /// The tier names a GPU class the policy does not define.
    #[error("failed to find GPU class {class} of tier {tier} in the policy")]
    FindGpuClass {
        /// Tier.
        tier: String,
        /// Missing class.
        class: String,
    },
    /// A toleration could not be serialized.
    #[error("failed to serialize a toleration: {0}")]
    SerializeToleration(#[source] serde_json::Error),
    /// The decision's edits could not be written as a patch of the full object.
    #[error(transparent)]
    BuildPatch(#[from] PatchError),
}

impl MutateError {
    /// Fixed reason for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::EditField { .. } => "edit_field",
            Self::FindGpuClass { .. } => "find_gpu_class",
            Self::SerializeToleration(_) => "serialize_toleration",
            Self::BuildPatch(error) => error.reason(),
        }
    }
}
