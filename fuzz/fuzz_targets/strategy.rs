//! Both placement-strategy annotation formats: seed 003's `schedule-strategy` and seed 004's `custom-pod-strategy`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tiergate_compat::strategy::{parse_custom_pod_strategy, parse_schedule_strategy};

fuzz_target!(|input: &str| {
    for parsed in [parse_schedule_strategy(input), parse_custom_pod_strategy(input)] {
        match parsed {
            Ok(strategy) => {
                let _ = (strategy.base(), strategy.weights());
            }
            Err(error) => {
                let _ = (error.reason(), error.detail(), error.to_string());
            }
        }
    }
});
