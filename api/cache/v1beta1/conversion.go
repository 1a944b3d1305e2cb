package v1beta1

// Hub marks v1beta1 as the version every other cache.okgoes.com version converts through, and the
// one the controller works with.
func (*RedisCache) Hub() {}
