#!/usr/bin/env bash
# Runs one cargo-fuzz target on the stable toolchain for SECONDS (default 600), starting from the committed seeds
# in fuzz/corpus/<target> (read-only) and keeping what it finds in fuzz/target/work/<target> (git-ignored).
# Crashes land in fuzz/artifacts/<target>. The libFuzzer log is fuzz/target/work/<target>/fuzz-0.log.
#
#   fuzz/run.sh admission_review 600
#   targets: admission_review strategy gpu_map policy_yaml
set -euo pipefail
TARGET=${1:?usage: fuzz/run.sh TARGET [SECONDS]}
SECONDS_TO_RUN=${2:-600}
FUZZ=$(cd "$(dirname "$0")" && pwd)
WORK="$FUZZ/target/work/$TARGET"
mkdir -p "$WORK/corpus"
cd "$WORK"
# cargo-fuzz passes nightly-only rustc flags (-Zsanitizer, ...); RUSTC_BOOTSTRAP lets the stable compiler accept
# them. No sanitizer: the code under test is safe Rust, and ASan would slow each run several times.
RUSTC_BOOTSTRAP=1 exec cargo fuzz run --fuzz-dir "$FUZZ" --sanitizer none "$TARGET" "$WORK/corpus" "$FUZZ/corpus/$TARGET" \
    -- -max_total_time="$SECONDS_TO_RUN" -jobs=1 -workers=1 -print_final_stats=1
