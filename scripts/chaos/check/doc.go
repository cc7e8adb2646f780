// Package check decides whether a history recorded by the chaos workload is
// correct. It owns the sequential specifications (porcupine models) of the
// port-lease table and of the resource table, both partitioned per key, and
// the checks porcupine cannot express: that no two leases on one port are ever
// believed held at the same real instant, that no lease is lost before the TTL
// its holder was granted, and that the generation a client observes never goes
// down.
//
// A history is a slice of Op, each with monotonic call and return times taken
// by the client. An operation whose outcome the client cannot know (a timeout,
// a connection reset after the request was sent, a 5xx such as 503
// outcome-unknown) is recorded as Indeterminate: the checker treats it as
// "may have happened at any instant after its call", which porcupine expresses
// by a return time of math.MaxInt64 and a model step that allows both outcomes.
package check
