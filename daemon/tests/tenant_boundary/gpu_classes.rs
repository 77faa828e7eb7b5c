//! GPU classes and priorities: foreign class labels by any field, unrecognised GPU resources, self-service priority.
