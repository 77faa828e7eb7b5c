//! The seed 002 `gpu-scheduling-map` pod template annotation (`ORDINAL=NODE:GPU[,GPU...]`, one line per
//! StatefulSet ordinal) parsed into a map from ordinal to node and GPU list; no I/O.

use std::collections::BTreeMap;

use crate::labels::dns_subdomain_problem;

/// Pod template annotation carrying the map (seed 002).
pub const GPU_SCHEDULING_MAP_ANNOTATION: &str = "gpu-scheduling-map";

/// Where each StatefulSet ordinal runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuMap {
    /// Ordinal -> node and GPUs.
    pub entries: BTreeMap<u32, GpuPin>,
}

/// One ordinal's node and GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuPin {
    /// Node name (matched against `kubernetes.io/hostname`).
    pub node: String,
    /// GPU indices or UUIDs, in the order written.
    pub gpus: Vec<String>,
}

impl GpuPin {
    /// The value for `CUDA_VISIBLE_DEVICES`, e.g. `0,1`.
    pub fn cuda_visible_devices(&self) -> String {
        self.gpus.join(",")
    }
}

/// A map that cannot be parsed; the message names the line and says the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GpuMapError {
    /// The annotation holds no entries.
    #[error("failed to parse gpu-scheduling-map: it has no entries; write one ORDINAL=NODE:GPU[,GPU...] per line")]
    ParseEmptyMap,
    /// One line is malformed.
    #[error("failed to parse gpu-scheduling-map line {line} `{text}`: {detail}")]
    ParseLine {
        /// 1-based line number.
        line: usize,
        /// The line as written (trimmed).
        text: String,
        /// What is wrong and how to fix it.
        detail: String,
    },
}

impl GpuMapError {
    /// Fixed reason for metrics and events.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::ParseEmptyMap => "parse_empty_gpu_map",
            Self::ParseLine { .. } => "parse_gpu_map_line",
        }
    }
}

const FORMAT: &str = "write ORDINAL=NODE:GPU[,GPU...], e.g. `0=node1:0,1`";

/// Parses the annotation value; blank lines are skipped, every other line must be `ORDINAL=NODE:GPU[,GPU...]`.
pub fn parse_gpu_scheduling_map(input: &str) -> Result<GpuMap, GpuMapError> {
    let mut map = GpuMap::default();
    let mut first_line_of = BTreeMap::new();
    for (index, text) in input.lines().enumerate() {
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let line = index + 1;
        let error = |detail: String| GpuMapError::ParseLine { line, text: text.to_owned(), detail };
        let (ordinal, pin) = parse_line(text).map_err(error)?;
        if let Some(first) = first_line_of.insert(ordinal, line) {
            return Err(error(format!(
                "ordinal {ordinal} is already mapped on line {first}; keep one line per ordinal"
            )));
        }
        map.entries.insert(ordinal, pin);
    }
    if map.entries.is_empty() {
        return Err(GpuMapError::ParseEmptyMap);
    }
    Ok(map)
}

fn parse_line(text: &str) -> Result<(u32, GpuPin), String> {
    let Some((ordinal, target)) = text.split_once('=') else {
        return Err(format!("has no `=`; {FORMAT}"));
    };
    let ordinal = ordinal.trim();
    let ordinal = match ordinal.parse::<u32>() {
        Ok(number) if ordinal.chars().all(|c| c.is_ascii_digit()) => number,
        _ => return Err(format!("ordinal `{ordinal}` is not a pod ordinal (0, 1, 2, ...); {FORMAT}")),
    };
    let Some((node, gpus)) = target.split_once(':') else {
        return Err(format!("`{}` has no `:` between node and GPUs; {FORMAT}", target.trim()));
    };
    let node = node.trim();
    if let Some(problem) = dns_subdomain_problem(node) {
        return Err(format!("node name `{node}` {problem}; {FORMAT}"));
    }
    let mut list: Vec<String> = Vec::new();
    for gpu in gpus.split(',').map(str::trim) {
        if !is_gpu_id(gpu) {
            return Err(format!("GPU `{gpu}` is not a GPU index (0, 1, ...) or UUID (GPU-..., MIG-...); {FORMAT}"));
        }
        if list.iter().any(|seen| seen == gpu) {
            return Err(format!("GPU `{gpu}` is listed twice; list each GPU once"));
        }
        list.push(gpu.to_owned());
    }
    Ok((ordinal, GpuPin { node: node.to_owned(), gpus: list }))
}

fn is_gpu_id(gpu: &str) -> bool {
    let index = !gpu.is_empty() && gpu.chars().all(|c| c.is_ascii_digit());
    let uuid = ["GPU-", "MIG-"].iter().any(|prefix| {
        gpu.strip_prefix(prefix).is_some_and(|rest| {
            !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '/'))
        })
    });
    index || uuid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(node: &str, gpus: &[&str]) -> GpuPin {
        GpuPin { node: node.to_owned(), gpus: gpus.iter().map(|gpu| (*gpu).to_owned()).collect() }
    }

    #[test]
    fn seed_002_example_maps_three_ordinals_to_three_nodes() {
        let map = parse_gpu_scheduling_map("0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n").unwrap();
        assert_eq!(
            map.entries,
            BTreeMap::from([
                (0, pin("node1", &["0", "1"])),
                (1, pin("node2", &["2"])),
                (2, pin("node3", &["0", "1", "2"]))
            ])
        );
        assert_eq!(map.entries[&0].cuda_visible_devices(), "0,1");
        assert_eq!(map.entries[&2].cuda_visible_devices(), "0,1,2");
    }

    #[test]
    fn blank_lines_and_indentation_are_ignored_and_uuids_are_kept_in_order() {
        let map = parse_gpu_scheduling_map("\n  3 = node-a : GPU-8f1c-22, 1\n\n").unwrap();
        assert_eq!(map.entries, BTreeMap::from([(3, pin("node-a", &["GPU-8f1c-22", "1"]))]));
    }

    const MALFORMED: &[(&str, usize, &str)] = &[
        ("0=node1:0,1\n1node2:2", 2, "has no `=`"),
        ("0=node1:0\nx=node2:2", 2, "ordinal `x`"),
        ("-1=node1:0", 1, "ordinal `-1`"),
        ("0=node1", 1, "`node1` has no `:`"),
        ("0=Node_1:0", 1, "node name `Node_1`"),
        ("0=:0", 1, "node name ``"),
        ("0=node1:", 1, "GPU ``"),
        ("0=node1:0,,1", 1, "GPU ``"),
        ("0=node1:zero", 1, "GPU `zero`"),
        ("0=node1:0,0", 1, "`0` is listed twice"),
        ("0=node1:0\n\n0=node2:1", 3, "already mapped on line 1"),
    ];

    #[test]
    fn malformed_lines_are_rejected_naming_the_line_and_the_format() {
        for (input, line, quoted) in MALFORMED {
            let error = parse_gpu_scheduling_map(input).unwrap_err();
            let message = error.to_string();
            assert!(message.contains(&format!("line {line} ")), "{input:?}: {message}");
            assert!(message.contains(quoted), "{input:?}: {message} should quote {quoted:?}");
            assert_eq!(error.reason(), "parse_gpu_map_line");
        }
    }

    #[test]
    fn an_empty_map_is_rejected_with_the_format() {
        let error = parse_gpu_scheduling_map(" \n\n").unwrap_err();
        assert_eq!(error, GpuMapError::ParseEmptyMap);
        assert!(error.to_string().contains("ORDINAL=NODE:GPU"));
    }
}
