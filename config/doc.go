// Package config owns elanous-node's configuration: the typed Config, its
// defaults, loading with a private viper instance (defaults < elanous.yaml <
// ELANOUS_* environment < command-line flags) and Validate, which checks a
// loaded Config as a whole before anything is started from it.
//
// Every key has a default (Default), so a key given only in the environment
// still reaches the typed Config. Keys are snake_case in the file and
// upper-case with "_" in the environment: raft.election_timeout is
// ELANOUS_RAFT_ELECTION_TIMEOUT. Lists come from the environment as follows:
// ELANOUS_CLUSTER_CANDIDATES is a JSON array of {"machine","url","raft"}
// objects and ELANOUS_PORTS_RESERVED is a comma-separated list (or a JSON
// array) of ports.
//
// The package imports only the standard library, viper and pflag; it never
// reads the process environment or files except in Load.
package config
