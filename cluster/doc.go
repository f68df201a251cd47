// Package cluster runs a sweep's worker processes on other nodes: a Head
// that node agents join over gRPC (ListenHead), the agent that lends its
// node (RunAgent), their sessions, heartbeats and loss, the folders that
// travel between them, their token and TLS, RemoteLauncher, which starts a
// worker on an agent's node as a workers.Process whose far side
// (workers.Remote) is the agent's session, and a head whose agents run in
// Slurm jobs it keeps in the queue (StartSlurm).
//
// cluster imports workers (nodes, the Manager, processes), its generated
// protocol (cluster/agentpb) and storage (the folder lock of a Slurm
// head's jobs); workers must never import cluster. It imports neither
// trainer nor tuner, which sit above it: the tuner takes a Head through
// tuner.WithCluster.
package cluster
