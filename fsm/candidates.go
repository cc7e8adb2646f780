package fsm

// CheckCandidate reports whether c would be accepted by PutCandidate's
// checks (a candidate name, a URL that is an http(s) origin in normal form,
// a Raft host:port), so a caller can refuse an entry before it takes any
// step that PutCandidate would then have to follow. The error wraps
// ErrInvalidCommand.
func CheckCandidate(c Candidate) error { return validCandidate(c) }
