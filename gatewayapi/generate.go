package gatewayapi

//go:generate go run ./internal/schemagen
