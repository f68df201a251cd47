package workers

// Usage is a snapshot of what a Manager hands out: its nodes' capacity,
// what granted groups hold of it now, and how many groups wait.
type Usage struct {
	// Capacity sums the nodes' CPUs, GPUs (devices, MIG devices counted one
	// each) and memory; memory counts only the nodes that know theirs.
	Capacity Resources
	// InUse is what granted groups hold: CPUs, GPUs (fractional shares
	// summed, so two workers at 0.5 on one device count 1) and memory
	// (on the nodes that account it).
	InUse Resources
	// Waiting counts the groups waiting for their resources.
	Waiting int
}

// Usage returns what the manager's granted groups hold now, next to its
// capacity. Resources reserved for a waiting group are not in use.
func (m *Manager) Usage() Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := Usage{Waiting: len(m.queue)}
	for i, n := range m.nodes {
		u.Capacity.CPUs += n.CPUs
		u.InUse.CPUs += float64(m.capacity.cpu[i]-max(m.free.cpu[i], 0)) / cpuScale
		if n.Memory > 0 {
			u.Capacity.Memory += n.Memory
			u.InUse.Memory += Bytes(m.capacity.mem[i] - max(m.free.mem[i], 0))
		}
		for dev := range n.GPUs {
			u.Capacity.GPUs++
			u.InUse.GPUs += float64(m.capacity.gpu[i][dev]-max(m.free.gpu[i][dev], 0)) / gpuScale
		}
	}
	return u
}
