//! Nodepool matching for `tiergate check`: which Karpenter NodePools or node-group templates can host each tier; pure.
