package fsm

// TypeName returns the registered name of type t, or "" when t is unknown:
// the name fixtures record beside each entry's type number.
func TypeName(t CommandType) string { return commandTable[t].name }
