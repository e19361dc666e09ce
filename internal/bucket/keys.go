package bucket

import (
	"crypto/sha256"
	"encoding/base64"
)

// KeyPrefix starts every Tollgate key (an ACL can be scoped to tg{*).
const KeyPrefix = "tg{"

// ClientKeyLen is the length of ClientKey's keys (unsharded).
const ClientKeyLen = len(KeyPrefix) + 10 + 1

// ClientKey returns the Redis key of a client's top-level bucket in a class:
// tg{tag}, where tag is the first 60 bits of SHA-256 over class and
// identity, as 10 characters of URL-safe base64. Rule buckets append
// ":name"; the shared {tag} puts all of one request's keys in one Redis
// Cluster slot.
//
// The key is kept at 14 bytes, the most Redis stores in a 16-byte
// allocation: a bucket then takes 56 bytes (MEMORY USAGE) instead of 72.
// 60 bits make two of 1,000,000 active clients of a class share a bucket
// with probability 4e-7.
func ClientKey(class, identity string) string {
	return HashKey(class + "\x00" + identity)
}

// HashKey is ClientKey of class and identity joined by a NUL.
func HashKey(classAndIdentity string) string {
	sum := sha256.Sum256([]byte(classAndIdentity))
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(sum[:8])[:10] + "}"
}
