//! Scoring inputs from a workload's annotations: seed 000's keys (`app.kubernetes.io/job-type`, `gpu.mem.gi`,
//! `ml.batch_size`, `scheduler.radix.ai/tenant`) and their `tiergate.io/` equivalents; pure, no I/O.
//!
//! When both spellings of one input are set, the `tiergate.io/` key wins; if the two values differ a
//! [`ScoringAnnotationError::ChooseBetweenKeys`] says which one was used. A value that does not parse is left out
//! (the workload is still scored without it) and reported as an error naming the key and the expected form.

use std::collections::BTreeMap;

/// Seed 000's job-type annotation (required for scoring unless `tiergate.io/job-type` is set).
pub const SEED_JOB_TYPE: &str = "app.kubernetes.io/job-type";
/// Seed 000's GPU memory annotation, GiB per GPU.
pub const SEED_GPU_MEM: &str = "gpu.mem.gi";
/// Seed 000's batch-size annotation.
pub const SEED_BATCH_SIZE: &str = "ml.batch_size";
/// Seed 000's tenant annotation.
pub const SEED_TENANT: &str = "scheduler.radix.ai/tenant";
/// tiergate's job-type annotation (wins over [`SEED_JOB_TYPE`]).
pub const JOB_TYPE: &str = "tiergate.io/job-type";
/// tiergate's GPU memory annotation, GiB per GPU (wins over [`SEED_GPU_MEM`]).
pub const GPU_MEM: &str = "tiergate.io/gpu-mem-gi";
/// tiergate's batch-size annotation (wins over [`SEED_BATCH_SIZE`]).
pub const BATCH_SIZE: &str = "tiergate.io/batch-size";
/// tiergate's tenant annotation (wins over [`SEED_TENANT`]).
pub const TENANT: &str = "tiergate.io/tenant";

/// The scoring inputs a workload declares; absent or unparsable values are `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScoringInputs {
    /// Job type, e.g. `train-bert`; scoring needs it.
    pub job_type: Option<String>,
    /// GPU memory the job needs per GPU, in GiB.
    pub gpu_mem_gib: Option<u32>,
    /// Training or inference batch size.
    pub batch_size: Option<u32>,
    /// Tenant (team) name, passed to the agent as is.
    pub tenant: Option<String>,
    /// Values that were left out or overridden, each naming the key and the fix.
    pub problems: Vec<ScoringAnnotationError>,
}

/// A scoring annotation that could not be used as written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScoringAnnotationError {
    /// A GPU memory value is not a positive whole number of GiB.
    #[error(
        "failed to parse annotation {key}={value:?}: expected a positive whole number of GiB per GPU, e.g. \"40\"; the job is scored without it"
    )]
    ParseGpuMemory {
        /// Annotation key.
        key: &'static str,
        /// The value as written.
        value: String,
    },
    /// A batch size is not a positive whole number.
    #[error(
        "failed to parse annotation {key}={value:?}: expected a positive whole number, e.g. \"16\"; the job is scored without it"
    )]
    ParseBatchSize {
        /// Annotation key.
        key: &'static str,
        /// The value as written.
        value: String,
    },
    /// A job type or tenant is empty or blank.
    #[error("failed to read annotation {key}: the value is empty; set a name such as \"train-bert\" or remove the key")]
    ReadEmptyValue {
        /// Annotation key.
        key: &'static str,
    },
    /// Both spellings of one input are set with different values; the `tiergate.io/` one is used.
    #[error(
        "failed to choose between annotations {seed_key}={seed_value:?} and {tiergate_key}={tiergate_value:?}: both are set and differ; using {tiergate_key} (remove one of them)"
    )]
    ChooseBetweenKeys {
        /// The seed's key (ignored).
        seed_key: &'static str,
        /// Its value.
        seed_value: String,
        /// The `tiergate.io/` key (used).
        tiergate_key: &'static str,
        /// Its value.
        tiergate_value: String,
    },
}

impl ScoringAnnotationError {
    /// Fixed reason for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ParseGpuMemory { .. } => "parse_gpu_memory",
            Self::ParseBatchSize { .. } => "parse_batch_size",
            Self::ReadEmptyValue { .. } => "empty_value",
            Self::ChooseBetweenKeys { .. } => "conflicting_keys",
        }
    }
}

/// The declared job type as the value of the `app.kubernetes.io/job-type` pod label (what co-location and
/// anti-affinity read), when it is a valid label value; `None` otherwise (no job type, or e.g. `train bert`).
/// `annotation` reads one annotation by key, so the caller need not build the map; the keys are chosen as
/// [`scoring_inputs`] chooses them.
pub fn job_type_label_value<'a>(annotation: impl Fn(&str) -> Option<&'a str>) -> Option<String> {
    let job_type = annotation(JOB_TYPE).or_else(|| annotation(SEED_JOB_TYPE))?.trim();
    let valid = !job_type.is_empty() && crate::labels::label_value_problem(job_type).is_none();
    valid.then(|| job_type.to_owned())
}

/// The scoring inputs declared by `annotations`, with every problem found.
pub fn scoring_inputs(annotations: &BTreeMap<String, String>) -> ScoringInputs {
    let mut problems = Vec::new();
    let job_type = chosen_value(annotations, SEED_JOB_TYPE, JOB_TYPE, &mut problems)
        .and_then(|(key, value)| name_value(key, value, &mut problems));
    let tenant = chosen_value(annotations, SEED_TENANT, TENANT, &mut problems)
        .and_then(|(key, value)| name_value(key, value, &mut problems));
    let gpu_mem_gib = chosen_value(annotations, SEED_GPU_MEM, GPU_MEM, &mut problems).and_then(|(key, value)| {
        let parsed = positive_number(value);
        if parsed.is_none() {
            problems.push(ScoringAnnotationError::ParseGpuMemory { key, value: value.to_owned() });
        }
        parsed
    });
    let batch_size = chosen_value(annotations, SEED_BATCH_SIZE, BATCH_SIZE, &mut problems).and_then(|(key, value)| {
        let parsed = positive_number(value);
        if parsed.is_none() {
            problems.push(ScoringAnnotationError::ParseBatchSize { key, value: value.to_owned() });
        }
        parsed
    });
    ScoringInputs { job_type, gpu_mem_gib, batch_size, tenant, problems }
}

/// The key and value to use for one input: the `tiergate.io/` one when set, else the seed's.
fn chosen_value<'a>(
    annotations: &'a BTreeMap<String, String>,
    seed_key: &'static str,
    tiergate_key: &'static str,
    problems: &mut Vec<ScoringAnnotationError>,
) -> Option<(&'static str, &'a str)> {
    match (annotations.get(seed_key), annotations.get(tiergate_key)) {
        (Some(seed_value), Some(tiergate_value)) => {
            if seed_value.trim() != tiergate_value.trim() {
                problems.push(ScoringAnnotationError::ChooseBetweenKeys {
                    seed_key,
                    seed_value: seed_value.clone(),
                    tiergate_key,
                    tiergate_value: tiergate_value.clone(),
                });
            }
            Some((tiergate_key, tiergate_value.as_str()))
        }
        (None, Some(value)) => Some((tiergate_key, value.as_str())),
        (Some(value), None) => Some((seed_key, value.as_str())),
        (None, None) => None,
    }
}

fn name_value(key: &'static str, value: &str, problems: &mut Vec<ScoringAnnotationError>) -> Option<String> {
    let trimmed = value.trim();
    if trimmed.is_empty() {
        problems.push(ScoringAnnotationError::ReadEmptyValue { key });
        return None;
    }
    Some(trimmed.to_owned())
}

fn positive_number(value: &str) -> Option<u32> {
    value.trim().parse::<u32>().ok().filter(|number| *number > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(key, value)| ((*key).to_owned(), (*value).to_owned())).collect()
    }

    #[test]
    fn job_type_becomes_a_label_value_only_when_it_is_a_valid_one() {
        let label = |pairs: &[(&str, &str)]| {
            let map = annotations(pairs);
            let value = job_type_label_value(|key| map.get(key).map(String::as_str));
            // The same job type `scoring_inputs` reads, kept only when it is a valid label value.
            let read = scoring_inputs(&map).job_type;
            assert!(value.is_none() || value == read, "{pairs:?}: {value:?} is not {read:?}");
            value
        };
        assert_eq!(label(&[(SEED_JOB_TYPE, "train-bert")]).as_deref(), Some("train-bert"));
        assert_eq!(label(&[(SEED_JOB_TYPE, " train-bert ")]).as_deref(), Some("train-bert"));
        assert_eq!(label(&[(SEED_JOB_TYPE, "a"), (JOB_TYPE, "b")]).as_deref(), Some("b"));
        assert_eq!(label(&[(SEED_JOB_TYPE, "a"), (JOB_TYPE, " ")]), None);
        assert_eq!(label(&[(JOB_TYPE, "train bert")]), None);
        assert_eq!(label(&[(SEED_JOB_TYPE, &"x".repeat(64))]), None);
        assert_eq!(label(&[]), None);
    }

    #[test]
    fn seed_keys_of_the_recorded_job_are_read() {
        let inputs = scoring_inputs(&annotations(&[
            (SEED_JOB_TYPE, "train-bert"),
            (SEED_GPU_MEM, "40"),
            (SEED_BATCH_SIZE, "16"),
            (SEED_TENANT, "team-a"),
        ]));
        assert_eq!(
            inputs,
            ScoringInputs {
                job_type: Some("train-bert".to_owned()),
                gpu_mem_gib: Some(40),
                batch_size: Some(16),
                tenant: Some("team-a".to_owned()),
                problems: vec![],
            }
        );
    }

    #[test]
    fn tiergate_keys_are_read_without_seed_keys() {
        let inputs = scoring_inputs(&annotations(&[
            (JOB_TYPE, "infer-llama"),
            (GPU_MEM, "20"),
            (BATCH_SIZE, "8"),
            (TENANT, "team-b"),
        ]));
        assert_eq!(inputs.job_type.as_deref(), Some("infer-llama"));
        assert_eq!(inputs.gpu_mem_gib, Some(20));
        assert_eq!(inputs.batch_size, Some(8));
        assert_eq!(inputs.tenant.as_deref(), Some("team-b"));
        assert!(inputs.problems.is_empty());
    }

    #[test]
    fn tiergate_key_wins_and_a_differing_seed_key_is_reported() {
        let inputs = scoring_inputs(&annotations(&[(SEED_GPU_MEM, "40"), (GPU_MEM, "80")]));
        assert_eq!(inputs.gpu_mem_gib, Some(80));
        let message = inputs.problems[0].to_string();
        assert!(message.contains("gpu.mem.gi") && message.contains("using tiergate.io/gpu-mem-gi"), "{message}");
        assert_eq!(inputs.problems[0].reason(), "conflicting_keys");
    }

    #[test]
    fn equal_values_under_both_keys_are_not_a_problem() {
        let inputs = scoring_inputs(&annotations(&[(SEED_JOB_TYPE, "train-bert"), (JOB_TYPE, "train-bert")]));
        assert_eq!(inputs.job_type.as_deref(), Some("train-bert"));
        assert!(inputs.problems.is_empty());
    }

    #[test]
    fn words_for_gpu_memory_are_refused_naming_the_key_and_the_expected_form() {
        let inputs = scoring_inputs(&annotations(&[(SEED_JOB_TYPE, "train-bert"), (SEED_GPU_MEM, "forty")]));
        assert_eq!(inputs.gpu_mem_gib, None);
        assert_eq!(inputs.job_type.as_deref(), Some("train-bert"));
        let message = inputs.problems[0].to_string();
        assert!(message.starts_with("failed to parse annotation gpu.mem.gi=\"forty\""), "{message}");
        assert!(message.contains("positive whole number of GiB"), "{message}");
        assert_eq!(inputs.problems[0].reason(), "parse_gpu_memory");
    }

    #[test]
    fn zero_negative_and_fractional_numbers_are_refused() {
        for bad in ["0", "-4", "1.5", "", "16Gi"] {
            let inputs = scoring_inputs(&annotations(&[(GPU_MEM, bad), (BATCH_SIZE, bad)]));
            assert_eq!((inputs.gpu_mem_gib, inputs.batch_size), (None, None), "value {bad:?}");
            let reasons: Vec<_> = inputs.problems.iter().map(ScoringAnnotationError::reason).collect();
            assert_eq!(reasons, ["parse_gpu_memory", "parse_batch_size"], "value {bad:?}");
        }
    }

    #[test]
    fn blank_job_type_is_reported_and_left_out() {
        let inputs = scoring_inputs(&annotations(&[(SEED_JOB_TYPE, "  ")]));
        assert_eq!(inputs.job_type, None);
        assert_eq!(inputs.problems, vec![ScoringAnnotationError::ReadEmptyValue { key: SEED_JOB_TYPE }]);
    }

    #[test]
    fn surrounding_whitespace_is_trimmed() {
        let inputs = scoring_inputs(&annotations(&[(SEED_JOB_TYPE, " train-bert "), (SEED_BATCH_SIZE, " 32 ")]));
        assert_eq!(inputs.job_type.as_deref(), Some("train-bert"));
        assert_eq!(inputs.batch_size, Some(32));
    }

    #[test]
    fn no_annotations_mean_no_inputs_and_no_problems() {
        assert_eq!(scoring_inputs(&BTreeMap::new()), ScoringInputs::default());
    }
}
