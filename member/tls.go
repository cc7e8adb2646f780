package member

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/elanous/elanous-node/wire"
)

// ErrPlaintextURL is returned for a request to an http:// address by a
// client built with a CA: with TLS on, a token goes only to a server whose
// certificate was verified, and plain HTTP verifies nothing.
var ErrPlaintextURL = errors.New("plaintext http:// address while a CA is configured")

// ErrInvalidCA wraps a CA that holds no usable PEM certificate.
var ErrInvalidCA = errors.New("invalid CA certificate")

// HTTPOptions configure NewHTTPClient.
type HTTPOptions struct {
	// CA is the PEM of the cluster CA (--ca-file, ELANOUS_CA_FILE,
	// tls.ca_file, or the join file's "ca"). When set, servers are verified
	// against it alone (not the system roots) and only https:// addresses
	// are used; nil means a default client.
	CA []byte
	// Certificate is presented to an API that asks for one
	// (tls.verify_incoming_api); nil presents none.
	Certificate *tls.Certificate
}

// NewHTTPClient returns the http.Client the member library and the client
// commands send requests with. With a CA, the TLS handshake checks the
// server's certificate against it — chain and name, for the host of the URL —
// before a byte of the request, headers and token included, is written, and
// a request to an http:// address fails with ErrPlaintextURL without being
// sent. The client has no overall timeout (blocking queries last up to their
// wait); every call takes its deadline from its context.
func NewHTTPClient(o HTTPOptions) (*http.Client, error) {
	if o.CA == nil {
		if o.Certificate != nil {
			return nil, errors.New("a client certificate needs a CA")
		}
		return &http.Client{}, nil
	}
	pool, err := ParseCA(o.CA)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if o.Certificate != nil {
		cfg.Certificates = []tls.Certificate{*o.Certificate}
	}
	transport := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     cfg,
		TLSHandshakeTimeout: 5 * time.Second,
		MaxIdleConns:        32,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{Transport: httpsOnly{transport}}, nil
}

// httpsOnly refuses every request that is not https.
type httpsOnly struct{ next http.RoundTripper }

func (h httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, fmt.Errorf("%w: %s://%s", ErrPlaintextURL, req.URL.Scheme, req.URL.Host)
	}
	return h.next.RoundTrip(req)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the transport.
func (h httpsOnly) CloseIdleConnections() {
	if c, ok := h.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// ParseCA decodes every PEM certificate of data into a pool (wire.ParseCAs);
// it fails with ErrInvalidCA when there is none or one does not parse.
func ParseCA(data []byte) (*x509.CertPool, error) {
	pool, err := wire.ParseCAs(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCA, err)
	}
	return pool, nil
}
