// Package testutil holds the helpers the tests of every package share:
// polling with a deadline, HTTP calls to a node and the checks of its
// answers, random tokens, and a log buffer safe for concurrent writers.
//
// It imports only the standard library and wire, so the internal tests
// of any package (cluster's included) can use it without an import cycle.
// It is not part of the product: nothing outside _test files and test
// harnesses (api/apitest) imports it.
package testutil
