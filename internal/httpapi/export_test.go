package httpapi

// BodiesInFlight returns how many request bodies s is reading (tests only).
func BodiesInFlight(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reading)
}
