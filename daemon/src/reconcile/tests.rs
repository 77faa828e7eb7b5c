//! Mocked-API-server tests of the reconciler: the calls it makes, in order.
