//! Policy mistakes a platform team makes that would silently open the boundary: unknown fields, odd quotas.
