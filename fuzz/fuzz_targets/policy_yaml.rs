//! TierPolicy YAML: `inputs::parse_policy`, then `validation::validate_policy` on whatever parses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tiergate::inputs::parse_policy;
use tiergate::validation::validate_policy;

fuzz_target!(|input: &str| {
    match parse_policy(input, "fuzz") {
        Ok(policy) => {
            if let Err(errors) = validate_policy(&policy) {
                let _ = errors.to_string();
            }
        }
        Err(error) => {
            let _ = (error.reason(), error.to_string());
        }
    }
});
