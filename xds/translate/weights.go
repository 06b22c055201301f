package translate

// DestinationWeight is Istio's weight of one of a route's n destinations
// whose weight field is weight: the only destination of a route gets 100
// whatever its field says; otherwise a weight ≤ 0 leaves the destination
// out (ok is false) and a positive one is kept as it is.
func DestinationWeight(weight int32, n int) (w uint32, ok bool) {
	if n == 1 {
		return 100, true
	}
	if weight <= 0 {
		return 0, false
	}
	return uint32(weight), true
}
