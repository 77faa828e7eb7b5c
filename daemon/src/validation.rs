//! TierPolicy validation: every problem of a policy, each naming its field path and the fix; no I/O.
