package audit

import goredis "github.com/redis/go-redis/v9"

func redis(addr string) *goredis.Client { return goredis.NewClient(&goredis.Options{Addr: addr}) }
