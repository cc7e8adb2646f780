// Package certs issues and loads the TLS material of an elanous-node cluster.
//
// A cluster has one certificate authority (elanous-node tls ca). Every
// candidate holds a certificate of that CA naming its machine as a DNS
// subject alternative name (elanous-node tls cert), valid for server and
// client authentication: the Raft transport checks that name on both ends of
// a connection, and the HTTPS API and its clients verify against the CA.
//
// A Store holds the files in use and swaps them atomically on Reload (SIGHUP
// in serve); the tls.Config values it hands out read the current material at
// each handshake, so rotation reaches new connections without a restart.
package certs
