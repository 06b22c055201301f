package sharedstate

// Seal signs body for name under prefix as a replica holding k would:
// tests write records straight into the store with it.
func Seal(k Key, prefix, name string, body []byte) []byte { return k.seal(prefix, name, body) }
