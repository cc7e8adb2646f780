package testutil

import (
	"crypto/rand"
	"encoding/hex"
)

// RandomToken returns a well-formed bearer token (64 lowercase hex
// characters) drawn from crypto/rand: a fresh cluster token, or one no
// server issued.
func RandomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
