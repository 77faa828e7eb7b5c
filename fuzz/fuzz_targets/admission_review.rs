//! AdmissionReview bytes -> `parse_review` -> `mutate` and `decide_review` (placement, built-in scorer) on the
//! sample snapshot -> `encode_review`. Besides "no panic": every patch tiergate returns applies to the object, and
//! the patch as sent (deep edits folded, `admission::fold`) stores what the patch as built stores.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tiergate::admission::{
    AdmissionInputs, build_static_snapshot, decide_review, encode_review, fold_deep_edits, mutate, object_as_sent,
    parse_review,
};
use tiergate::inputs::{SAMPLE_CLUSTER, load_policy, parse_cluster_view};
use tiergate::placement::PlacementLedger;
use tiergate::scoring::Scorer;
use tiergate::view::Snapshot;

struct Fixed {
    snapshot: Snapshot,
    scorer: Scorer,
    runtime: tokio::runtime::Runtime,
}

fn fixed() -> &'static Fixed {
    static FIXED: OnceLock<Fixed> = OnceLock::new();
    FIXED.get_or_init(|| {
        let view = parse_cluster_view(SAMPLE_CLUSTER, "sample").expect("sample cluster parses");
        let policy = load_policy(None).expect("sample policy parses");
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime starts");
        Fixed { snapshot: build_static_snapshot(policy, view, None), scorer: Scorer::default(), runtime }
    })
}

fuzz_target!(|data: &[u8]| {
    let fixed = fixed();
    let Ok(request) = parse_review(data) else { return };
    let object = request.object.as_ref().map(|object| serde_json::to_value(object).expect("object serializes"));
    for decision in [
        mutate(&request, &fixed.snapshot, &AdmissionInputs::default()),
        fixed.runtime.block_on(decide_review(&request, &fixed.snapshot, &PlacementLedger::default(), &fixed.scorer)),
    ] {
        if let Some(mut object) = object.clone()
            && !decision.patch.0.is_empty()
        {
            let applied = json_patch::patch(&mut object, &decision.patch);
            assert!(applied.is_ok(), "patch does not apply: {applied:?}\npatch: {:?}", decision.patch);
        }
        if let Some(folded) = fold_deep_edits(&decision.patch, data) {
            let syntax = serde_json::from_slice::<serde::de::IgnoredAny>(&folded);
            assert!(syntax.is_ok(), "the folded patch is not JSON: {syntax:?}");
            if let Some(mut through_built) = object_as_sent(data) {
                let folded: json_patch::Patch = serde_json::from_slice(&folded).expect("the folded patch is JSON");
                let mut through_folded = through_built.clone();
                json_patch::patch(&mut through_built, &decision.patch).expect("the patch as built applies");
                json_patch::patch(&mut through_folded, &folded).expect("the folded patch applies");
                assert_eq!(through_folded, through_built, "folding changed the stored object: {folded:?}");
            }
        }
        encode_review(&decision.response(&request)).expect("the answer encodes");
    }
});
