//! The translation: policy + cluster view -> the desired Kueue objects, deterministic and pure.
