package shopdb

import (
	"fmt"
	"strconv"
)

// Currency is the one currency the demo shop sells in.
const Currency = "USD"

// Money is an amount in cents.
type Money int64

// Decimal is the amount as the terms carry it: "70.00", "-20.00".
func (m Money) Decimal() string {
	sign := ""
	v := int64(m)
	if v < 0 {
		sign, v = "-", -v
	}
	return sign + strconv.FormatInt(v/100, 10) + "." + fmt.Sprintf("%02d", v%100)
}

// String is the amount as a person reads it: "$70.00", "-$20.00".
func (m Money) String() string {
	if m < 0 {
		return "-$" + (-m).Decimal()
	}
	return "$" + m.Decimal()
}
