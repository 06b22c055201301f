package adapter

import "time"

// MinRetry is the first reconnect delay of a registry watch; each failure
// doubles it up to the adapter's RetryMax (internal/retry).
const MinRetry = 100 * time.Millisecond
