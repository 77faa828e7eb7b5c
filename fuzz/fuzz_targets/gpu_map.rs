//! The `gpu-scheduling-map` annotation (seed 005): `ORDINAL=NODE:GPU[,GPU...]` lines.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tiergate_compat::gpu_map::parse_gpu_scheduling_map;

fuzz_target!(|input: &str| {
    match parse_gpu_scheduling_map(input) {
        Ok(map) => {
            let _ = format!("{map:?}");
        }
        Err(error) => {
            let _ = (error.reason(), error.to_string());
        }
    }
});
