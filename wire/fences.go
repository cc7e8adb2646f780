package wire

// CodeStaleFence (409) answers POST /v1/fences/check for a fence that is not
// the fence of the port's live lease: the lease was released, expired or
// granted again, or the fence was never granted on the port.
const CodeStaleFence = "stale-fence"

// FenceCheckRequest is the body of POST /v1/fences/check: a port and the
// fence its grant carried (wire.PortLease.Fence).
type FenceCheckRequest struct {
	Port  int    `json:"port"`
	Fence uint64 `json:"fence"`
}

// FenceCheck is the 200 answer of POST /v1/fences/check: the fence is the
// fence of the port's live lease, held by Machine until ExpiresAt (Unix ms)
// unless renewed, granted in Generation.
type FenceCheck struct {
	Valid      bool   `json:"valid"`
	Port       int    `json:"port"`
	Fence      uint64 `json:"fence"`
	Generation uint64 `json:"generation"`
	Machine    string `json:"machine"`
	ExpiresAt  int64  `json:"expiresAt"`
}

// StaleFence is the 409 answer of POST /v1/fences/check: the error body
// with CurrentFence, the fence of the port's live lease, when the port has
// one (omitted otherwise).
type StaleFence struct {
	Error        string `json:"error"`
	Message      string `json:"message"`
	CurrentFence uint64 `json:"currentFence,omitempty"`
}
