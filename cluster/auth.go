package cluster

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// TLSFiles names the PEM files of a cluster's TLS. The head serves with
// Cert and Key; an agent checks the head's certificate against CA (the
// system's roots when CA is empty). Given a CA, the head also requires
// every agent to present a certificate it signed (Cert and Key on the
// agent's side): mutual TLS.
type TLSFiles struct {
	Cert, Key, CA string
}

// IsZero reports whether f names no file: the cluster then speaks
// plaintext, and only the token guards it.
func (f TLSFiles) IsZero() bool { return f == TLSFiles{} }

// ServerTLS is the head's TLS configuration from f, which must name Cert
// and Key.
func ServerTLS(f TLSFiles) (*tls.Config, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("tls: the head needs both a certificate and its key")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientTLS is an agent's TLS configuration from f: CA (or the system's
// roots) checks the head's certificate for serverName, the head address's
// host; Cert and Key, when given, are the agent's own certificate.
func ClientTLS(f TLSFiles, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pool, err := loadPool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("tls: give the agent's certificate and its key together")
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: %s holds no PEM certificate", path)
	}
	return pool, nil
}

// tokenCreds puts the shared token on every call of an agent.
type tokenCreds struct{ token string }

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + c.token}, nil
}

// RequireTransportSecurity is false: without TLS the token travels in the
// clear, which the documentation warns about.
func (tokenCreds) RequireTransportSecurity() bool { return false }

// tokenGuard checks the token of every call to the head, in constant time
// (over SHA-256 digests, so that not even the token's length leaks), and
// logs the calls it refuses.
type tokenGuard struct {
	want [32]byte
	logf func(format string, args ...any)
}

func newTokenGuard(token string, logf func(string, ...any)) *tokenGuard {
	return &tokenGuard{want: sha256.Sum256([]byte(token)), logf: logf}
}

func (g *tokenGuard) check(ctx context.Context, method string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	got, ok := "", false
	if len(vals) == 1 {
		got, ok = strings.CutPrefix(vals[0], "Bearer ")
	}
	sum := sha256.Sum256([]byte(got))
	if subtle.ConstantTimeCompare(sum[:], g.want[:]) == 1 && ok {
		return nil
	}
	from := "an unknown address"
	if p, found := peer.FromContext(ctx); found && p.Addr != nil {
		from = p.Addr.String()
	}
	why := "a wrong token"
	if len(vals) == 0 {
		why = "no token"
	}
	g.logf("refused a call to %s from %s: %s", method, from, why)
	return status.Error(codes.Unauthenticated, "the cluster token does not match: give the agent the head's --token")
}

func (g *tokenGuard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := g.check(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (g *tokenGuard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := g.check(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}
