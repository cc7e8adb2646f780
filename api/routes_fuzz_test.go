package api

// RouteTableForTest returns the method and path of every route of the route
// table, for the external tests: FuzzHTTP seeds a request to each of them.
func RouteTableForTest() [][2]string {
	var out [][2]string
	for _, rt := range (&Server{}).routeTable(true) {
		out = append(out, [2]string{rt.method, rt.path})
	}
	return out
}
