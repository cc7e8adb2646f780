package cluster

// Accessors for the tests of this package; the same figures reach operators
// through Collector.

// BatchStats returns how many batch entries this node proposed and how many
// commands they carried.
func (n *Node) BatchStats() (batches, commands uint64) { return n.batches.read() }

// Announcements returns how many barriers AnnounceCommit appended (the
// fallback when a follower could not be told directly).
func (n *Node) Announcements() uint64 {
	_, barriers := n.announce.counts()
	return barriers
}

// DirectAnnouncements returns how many commit announcements AnnounceCommit
// sent to a follower (and the follower accepted).
func (n *Node) DirectAnnouncements() uint64 {
	direct, _ := n.announce.counts()
	return direct
}
