// Package agentpb is the generated gRPC code of the protocol between a
// sweep's head and its node agents (agent.proto). Package cluster
// implements both sides; agentpb imports nothing of gotune's.
package agentpb

// Refreshing needs protoc (Debian's protobuf-compiler) and the Go plugins:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//
//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative agent.proto
