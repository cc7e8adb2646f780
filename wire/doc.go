// Package wire holds the JSON request and response types of the elanous-node HTTP
// API and its error codes. Both the server (package api) and the Go clients
// (package member, the CLI) use these types, so a field renamed here is a wire
// change. It imports only the standard library.
package wire
