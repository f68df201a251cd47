// Package cluster runs a sweep's worker processes on other nodes: a Head
// that node agents join over gRPC (ListenHead), the agent that lends its
// node (RunAgent), their sessions, heartbeats and loss, the folders that
// travel between them, their token and TLS, and RemoteLauncher, which
// starts a worker on an agent's node as a workers.Process whose far side
// (workers.Remote) is the agent's session.
//
// cluster imports workers (nodes, the Manager, processes) and its
// generated protocol, cluster/agentpb; workers must never import cluster.
// It imports neither trainer nor tuner: the tuner takes a Head through
// tuner.WithCluster.
package cluster
