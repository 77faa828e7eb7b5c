//! Exhausting the webhook: concurrent large bodies, HTTP/2 oversize bodies, timeouts that disagree with the chart.
