package api

// ParkedQueries is how many blocking queries the server holds parked (its
// connections taken from net/http; park.go).
func (s *Server) ParkedQueries() int {
	p := s.parking.Load()
	if p == nil {
		return 0
	}
	return p.parked()
}
