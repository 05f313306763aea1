// Package shopdb is the demo shop's in-memory database: a catalog, one demo
// account with its orders, subscription and deliveries, and the business
// actions that change them. Every method takes the lock and returns copies,
// so callers never share state with the database.
//
// Each action comes in two steps: Plan… works out exactly what the action
// would do (the terms an approval covers), and the action itself performs a
// plan, refusing with ErrConflict when the data no longer matches it.
package shopdb

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// DemoAccount is the seeded account.
const DemoAccount = "acct_demo"

var (
	// ErrNotFound: no such order, item, product, delivery or subscription.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the request asks for something the shop can't do.
	ErrInvalid = errors.New("invalid request")
	// ErrConflict: the data changed since the plan was made.
	ErrConflict = errors.New("changed since it was planned")
)

// SKU is one thing the shop sells: a product in one size.
type SKU struct {
	ID      string // "stormline-insulated-m"
	Product string // product slug
	Name    string // "Stormline Insulated Jacket (M)"
	Size    string // "M"
	Price   Money
}

// Product is a catalog entry, sold in one or more SKUs.
type Product struct {
	Slug        string
	Name        string
	Tagline     string
	Description string
	Family      string // products of one family can be exchanged for each other
	Hue         int    // colour of its tile, 0–359
	SKUs        []SKU
}

// From is the lowest price of the product.
func (p Product) From() Money {
	low := p.SKUs[0].Price
	for _, s := range p.SKUs {
		low = min(low, s.Price)
	}
	return low
}

// Account is a customer.
type Account struct {
	ID    string
	Name  string
	Email string
}

// Item is one line of an order.
type Item struct {
	ID    string // "itm_4Qa"
	SKU   string
	Name  string
	Price Money
	// Exchanges are this item's past exchanges, oldest first.
	Exchanges []Exchange
}

// Exchange is a performed exchange of an order's item.
type Exchange struct {
	OrderID, ItemID string
	From, To        SKU
	PriceDifference Money // positive: charged; negative: refunded
	At              time.Time
}

// Order is an account's order.
type Order struct {
	ID       string // "ord_7Hk2"
	Account  string
	PlacedAt time.Time
	Status   string
	Items    []Item
	// Charges are charges (positive) and refunds (negative) to the card
	// used for the order after it was placed, such as an exchange's price
	// difference.
	Charges []Charge
}

// Charge is a charge or refund on the card used for an order.
type Charge struct {
	Label  string
	Amount Money
	At     time.Time
}

// Total is the price of the order's items as they are now.
func (o Order) Total() Money {
	var t Money
	for _, it := range o.Items {
		t += it.Price
	}
	return t
}

// Subscription statuses.
const (
	SubscriptionActive    = "active"
	SubscriptionCancelled = "cancelled"
)

// Subscription is an account's monthly subscription.
type Subscription struct {
	ID          string // "sub_5Kd1"
	Account     string
	Plan        string
	Price       Money // per month
	Status      string
	PeriodStart time.Time // start of the current paid month
	RenewsOn    time.Time // end of it: the next charge
	CancelledOn time.Time // zero while active
	Refund      Money     // refunded on cancellation
}

// Delivery is an order's upcoming delivery.
type Delivery struct {
	ID      string // "del_2Wn8"
	OrderID string
	Account string
	Date    time.Time // a day, at midnight UTC
	Window  string
	Address string
	// Changes are past date changes, oldest first.
	Changes []DateChange
}

// DateChange is a performed change of a delivery's date.
type DateChange struct {
	From, To time.Time
	At       time.Time
}

// DB is the shop's data.
type DB struct {
	mu            sync.Mutex
	products      []Product
	skus          map[string]SKU
	accounts      map[string]Account
	orders        []*Order
	subscriptions map[string]*Subscription
	deliveries    []*Delivery
}

// Day returns t's calendar day (UTC) at midnight.
func Day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// MaxHistory bounds each list of past changes the database keeps (an
// item's exchanges, an order's charges, a delivery's date changes): an
// agent may repeat an action all day, and the oldest entries go first.
const MaxHistory = 20

// appendBounded appends v to list, keeping at most MaxHistory entries.
func appendBounded[T any](list []T, v T) []T {
	list = append(list, v)
	if n := len(list) - MaxHistory; n > 0 {
		list = slices.Delete(list, 0, n)
	}
	return list
}

// The catalog is the same in every database and never changes once built,
// so every database shares one (products and SKUs are returned as copies).
var (
	catalogOnce     sync.Once
	catalogProducts []Product
	catalogSKUs     map[string]SKU
)

func catalog() ([]Product, map[string]SKU) {
	catalogOnce.Do(func() { catalogProducts, catalogSKUs = buildCatalog() })
	return catalogProducts, catalogSKUs
}

// New returns the database seeded with the catalog and the demo account,
// with dates around now.
func New(now time.Time) *DB {
	db := &DB{
		accounts:      map[string]Account{},
		subscriptions: map[string]*Subscription{},
	}
	db.products, db.skus = catalog()
	db.accounts[DemoAccount] = Account{ID: DemoAccount, Name: "Jordan Rivera", Email: "jordan@example.com"}
	today := Day(now)
	item := func(id, sku string) Item {
		s := db.skus[sku]
		return Item{ID: id, SKU: s.ID, Name: s.Name, Price: s.Price}
	}
	db.orders = []*Order{
		{
			ID: "ord_7Hk2", Account: DemoAccount, PlacedAt: today.AddDate(0, 0, -12).Add(10 * time.Hour), Status: "Delivered",
			Items: []Item{item("itm_4Qa", "stormline-m"), item("itm_6Rb", "merino-socks-2-pack")},
		},
		{
			ID: "ord_9Lm3", Account: DemoAccount, PlacedAt: today.AddDate(0, 0, -2).Add(15 * time.Hour), Status: "On its way",
			Items: []Item{item("itm_9Tc", "summit-daypack-22-l"), item("itm_2Vd", "trailhead-boots-10")},
		},
	}
	start := today.AddDate(0, 0, -10)
	db.subscriptions[DemoAccount] = &Subscription{
		ID: "sub_5Kd1", Account: DemoAccount, Plan: "Trail Box, monthly", Price: 2900,
		Status: SubscriptionActive, PeriodStart: start, RenewsOn: start.AddDate(0, 1, 0),
	}
	db.deliveries = []*Delivery{{
		ID: "del_2Wn8", OrderID: "ord_9Lm3", Account: DemoAccount,
		Date: today.AddDate(0, 0, 4), Window: "8 am to 12 pm",
		Address: "14 Alder Lane, Portland, OR 97205",
	}}
	return db
}

func buildCatalog() ([]Product, map[string]SKU) {
	db := &DB{skus: map[string]SKU{}}
	add := func(p Product, sizes []string, price []Money) {
		for i, size := range sizes {
			id := p.Slug
			name := p.Name
			if size != "" {
				id += "-" + sizeSlug(size)
				name += " (" + size + ")"
			}
			s := SKU{ID: id, Product: p.Slug, Name: name, Size: size, Price: price[i]}
			p.SKUs = append(p.SKUs, s)
			db.skus[id] = s
		}
		db.products = append(db.products, p)
	}
	add(Product{
		Slug: "stormline", Name: "Stormline Jacket", Family: "stormline", Hue: 205,
		Tagline:     "A light, fully taped rain shell for every season.",
		Description: "Three-layer waterproof fabric, pit zips and a hood that turns with your head. Packs into its own pocket.",
	}, []string{"S", "M", "L"}, []Money{12000, 12000, 12000})
	add(Product{
		Slug: "stormline-insulated", Name: "Stormline Insulated Jacket", Family: "stormline", Hue: 222,
		Tagline:     "The Stormline shell with a warm synthetic lining.",
		Description: "Everything the Stormline does, with 80 g of recycled insulation that stays warm when wet. For cold, wet days.",
	}, []string{"S", "M", "L"}, []Money{19000, 19000, 19000})
	add(Product{
		Slug: "trailhead-boots", Name: "Trailhead Boots", Family: "trailhead-boots", Hue: 28,
		Tagline:     "Waterproof leather hiking boots, broken in from day one.",
		Description: "Full-grain leather, a grippy lugged sole and a cushioned footbed for long days on rough ground.",
	}, []string{"9", "10", "11"}, []Money{16500, 16500, 16500})
	add(Product{
		Slug: "summit-daypack", Name: "Summit Daypack", Family: "summit-daypack", Hue: 145,
		Tagline:     "A day on the hill, carried comfortably.",
		Description: "A ventilated back panel, a hydration sleeve and a lid pocket for the things you reach for most.",
	}, []string{"22 L", "30 L"}, []Money{8900, 9900})
	add(Product{
		Slug: "merino-socks", Name: "Merino Trail Socks", Family: "merino-socks", Hue: 350,
		Tagline:     "Soft, warm and they don't smell after day three.",
		Description: "Merino wool with a reinforced heel and toe. Sold as a pack of two pairs.",
	}, []string{"2 pack"}, []Money{2400})

	return db.products, db.skus
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

func sizeSlug(size string) string {
	out := make([]byte, 0, len(size))
	for i := 0; i < len(size); i++ {
		c := size[i]
		switch {
		case 'A' <= c && c <= 'Z':
			out = append(out, c+'a'-'A')
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			out = append(out, c)
		case c == ' ' && len(out) > 0 && out[len(out)-1] != '-':
			out = append(out, '-')
		}
	}
	return string(out)
}

// Products returns the catalog.
func (db *DB) Products() []Product {
	db.mu.Lock()
	defer db.mu.Unlock()
	out := make([]Product, len(db.products))
	for i, p := range db.products {
		p.SKUs = slices.Clone(p.SKUs)
		out[i] = p
	}
	return out
}

// Product returns the product with slug.
func (db *DB) Product(slug string) (Product, bool) {
	for _, p := range db.Products() {
		if p.Slug == slug {
			return p, true
		}
	}
	return Product{}, false
}

// SKU returns the SKU with id.
func (db *DB) SKU(id string) (SKU, bool) {
	db.mu.Lock()
	defer db.mu.Unlock()
	s, ok := db.skus[id]
	return s, ok
}

// Account returns the account with id.
func (db *DB) Account(id string) (Account, bool) {
	db.mu.Lock()
	defer db.mu.Unlock()
	a, ok := db.accounts[id]
	return a, ok
}

// Orders returns an account's orders, newest first.
func (db *DB) Orders(account string) []Order {
	db.mu.Lock()
	defer db.mu.Unlock()
	var out []Order
	for _, o := range db.orders {
		if o.Account == account {
			out = append(out, copyOrder(o))
		}
	}
	slices.SortFunc(out, func(a, b Order) int { return b.PlacedAt.Compare(a.PlacedAt) })
	return out
}

// Order returns one of an account's orders.
func (db *DB) Order(account, id string) (Order, bool) {
	db.mu.Lock()
	defer db.mu.Unlock()
	o := db.order(account, id)
	if o == nil {
		return Order{}, false
	}
	return copyOrder(o), true
}

func (db *DB) order(account, id string) *Order {
	for _, o := range db.orders {
		if o.Account == account && o.ID == id {
			return o
		}
	}
	return nil
}

func copyOrder(o *Order) Order {
	c := *o
	c.Items = slices.Clone(o.Items)
	for i := range c.Items {
		c.Items[i].Exchanges = slices.Clone(c.Items[i].Exchanges)
	}
	c.Charges = slices.Clone(o.Charges)
	return c
}

// ExchangeOptions returns what an item with SKU sku can be exchanged for:
// the other SKUs of its product family.
func (db *DB) ExchangeOptions(sku string) []SKU {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.exchangeOptions(sku)
}

func (db *DB) exchangeOptions(sku string) []SKU {
	from, ok := db.skus[sku]
	if !ok {
		return nil
	}
	var family string
	for _, p := range db.products {
		if p.Slug == from.Product {
			family = p.Family
		}
	}
	var out []SKU
	for _, p := range db.products {
		if p.Family != family {
			continue
		}
		for _, s := range p.SKUs {
			if s.ID != sku {
				out = append(out, s)
			}
		}
	}
	// The same size first: the likeliest exchange is another model in it.
	slices.SortStableFunc(out, func(a, b SKU) int {
		return boolRank(a.Size != from.Size) - boolRank(b.Size != from.Size)
	})
	return out
}

// ExchangePlan is exactly what an exchange does.
type ExchangePlan struct {
	OrderID, ItemID string
	From, To        SKU
	PriceDifference Money
	// Fee is charged on top of the price difference; 0 for none (the
	// demo's bench adds one to make new terms, shop/bench.go).
	Fee Money
}

// PlanExchange works out the exchange of an order's item for replacement.
func (db *DB) PlanExchange(account, orderID, itemID, replacement string) (ExchangePlan, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	o := db.order(account, orderID)
	if o == nil {
		return ExchangePlan{}, fmt.Errorf("order %q: %w", orderID, ErrNotFound)
	}
	i := slices.IndexFunc(o.Items, func(it Item) bool { return it.ID == itemID })
	if i < 0 {
		return ExchangePlan{}, fmt.Errorf("item %q on order %s: %w", itemID, orderID, ErrNotFound)
	}
	from := db.skus[o.Items[i].SKU]
	to, ok := db.skus[replacement]
	if !ok || !slices.ContainsFunc(db.exchangeOptions(from.ID), func(s SKU) bool { return s.ID == replacement }) {
		return ExchangePlan{}, fmt.Errorf("%s can't be exchanged for %q: %w", from.Name, replacement, ErrInvalid)
	}
	return ExchangePlan{OrderID: orderID, ItemID: itemID, From: from, To: to, PriceDifference: to.Price - from.Price}, nil
}

// Exchange performs plan: the item becomes plan.To and the price
// difference is charged or refunded on the order. ErrConflict when the item
// is no longer plan.From or the prices changed.
func (db *DB) Exchange(account string, plan ExchangePlan, now time.Time) (Exchange, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	o := db.order(account, plan.OrderID)
	if o == nil {
		return Exchange{}, fmt.Errorf("order %q: %w", plan.OrderID, ErrNotFound)
	}
	i := slices.IndexFunc(o.Items, func(it Item) bool { return it.ID == plan.ItemID })
	if i < 0 {
		return Exchange{}, fmt.Errorf("item %q: %w", plan.ItemID, ErrNotFound)
	}
	it := &o.Items[i]
	if it.SKU != plan.From.ID || db.skus[plan.To.ID].Price-db.skus[plan.From.ID].Price != plan.PriceDifference {
		return Exchange{}, fmt.Errorf("exchange of %s: %w", plan.ItemID, ErrConflict)
	}
	ex := Exchange{OrderID: plan.OrderID, ItemID: plan.ItemID, From: plan.From, To: plan.To, PriceDifference: plan.PriceDifference, At: now}
	it.Exchanges = appendBounded(it.Exchanges, ex)
	it.SKU, it.Name, it.Price = plan.To.ID, plan.To.Name, plan.To.Price
	if plan.PriceDifference != 0 {
		o.Charges = appendBounded(o.Charges, Charge{
			Label:  "Exchange of the " + plan.From.Name + " for the " + plan.To.Name,
			Amount: plan.PriceDifference,
			At:     now,
		})
	}
	if plan.Fee != 0 {
		o.Charges = appendBounded(o.Charges, Charge{Label: "Handling fee of the exchange", Amount: plan.Fee, At: now})
	}
	return ex, nil
}

// Subscription returns an account's subscription.
func (db *DB) Subscription(account string) (Subscription, bool) {
	db.mu.Lock()
	defer db.mu.Unlock()
	s, ok := db.subscriptions[account]
	if !ok {
		return Subscription{}, false
	}
	return *s, true
}

// CancelPlan is exactly what a cancellation does.
type CancelPlan struct {
	SubscriptionID string
	Plan           string
	EffectiveDate  time.Time // a day
	Refund         Money     // for the unused days of the paid month
}

// PlanCancel works out cancelling an account's subscription today: it
// ends today and the unused days of the paid month are refunded.
func (db *DB) PlanCancel(account string, now time.Time) (CancelPlan, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	s, ok := db.subscriptions[account]
	if !ok {
		return CancelPlan{}, fmt.Errorf("subscription: %w", ErrNotFound)
	}
	if s.Status != SubscriptionActive {
		return CancelPlan{}, fmt.Errorf("subscription %s is %s: %w", s.ID, s.Status, ErrInvalid)
	}
	return cancelPlan(s, now), nil
}

func cancelPlan(s *Subscription, now time.Time) CancelPlan {
	today := Day(now)
	period := int64(s.RenewsOn.Sub(s.PeriodStart).Hours() / 24)
	unused := int64(s.RenewsOn.Sub(today).Hours() / 24)
	unused = max(0, min(unused, period))
	var refund Money
	if period > 0 {
		refund = Money(int64(s.Price) * unused / period)
	}
	return CancelPlan{SubscriptionID: s.ID, Plan: s.Plan, EffectiveDate: today, Refund: refund}
}

// CancelSubscription performs plan. ErrConflict when the subscription is no
// longer active or the plan no longer matches today's terms.
func (db *DB) CancelSubscription(account string, plan CancelPlan, now time.Time) (Subscription, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	s, ok := db.subscriptions[account]
	if !ok || s.ID != plan.SubscriptionID {
		return Subscription{}, fmt.Errorf("subscription %q: %w", plan.SubscriptionID, ErrNotFound)
	}
	if s.Status != SubscriptionActive || cancelPlan(s, now) != plan {
		return Subscription{}, fmt.Errorf("cancellation of %s: %w", s.ID, ErrConflict)
	}
	s.Status = SubscriptionCancelled
	s.CancelledOn = plan.EffectiveDate
	s.Refund = plan.Refund
	return *s, nil
}

// ResubscribePlan is exactly what resubscribing does: a new paid month of
// the same plan, from today, charged today.
type ResubscribePlan struct {
	SubscriptionID string
	Plan           string
	Price          Money     // charged today, and each month after
	StartDate      time.Time // a day: today
	RenewsOn       time.Time // a day: the next charge
}

// PlanResubscribe works out resubscribing an account's cancelled
// subscription today, so that cancelling and resubscribing can be done
// again and again.
func (db *DB) PlanResubscribe(account string, now time.Time) (ResubscribePlan, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	s, ok := db.subscriptions[account]
	if !ok {
		return ResubscribePlan{}, fmt.Errorf("subscription: %w", ErrNotFound)
	}
	if s.Status != SubscriptionCancelled {
		return ResubscribePlan{}, fmt.Errorf("subscription %s is %s: %w", s.ID, s.Status, ErrInvalid)
	}
	return resubscribePlan(s, now), nil
}

func resubscribePlan(s *Subscription, now time.Time) ResubscribePlan {
	today := Day(now)
	return ResubscribePlan{SubscriptionID: s.ID, Plan: s.Plan, Price: s.Price, StartDate: today, RenewsOn: today.AddDate(0, 1, 0)}
}

// Resubscribe performs plan. ErrConflict when the subscription is no longer
// cancelled or the plan no longer matches today's terms.
func (db *DB) Resubscribe(account string, plan ResubscribePlan, now time.Time) (Subscription, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	s, ok := db.subscriptions[account]
	if !ok || s.ID != plan.SubscriptionID {
		return Subscription{}, fmt.Errorf("subscription %q: %w", plan.SubscriptionID, ErrNotFound)
	}
	if s.Status != SubscriptionCancelled || resubscribePlan(s, now) != plan {
		return Subscription{}, fmt.Errorf("resubscription of %s: %w", s.ID, ErrConflict)
	}
	s.Status = SubscriptionActive
	s.PeriodStart, s.RenewsOn = plan.StartDate, plan.RenewsOn
	s.CancelledOn, s.Refund = time.Time{}, 0
	return *s, nil
}

// Deliveries returns an account's deliveries, soonest first.
func (db *DB) Deliveries(account string) []Delivery {
	db.mu.Lock()
	defer db.mu.Unlock()
	var out []Delivery
	for _, d := range db.deliveries {
		if d.Account == account {
			c := *d
			c.Changes = slices.Clone(d.Changes)
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Delivery) int { return a.Date.Compare(b.Date) })
	return out
}

// Delivery returns one of an account's deliveries.
func (db *DB) Delivery(account, id string) (Delivery, bool) {
	for _, d := range db.Deliveries(account) {
		if d.ID == id {
			return d, true
		}
	}
	return Delivery{}, false
}

// Earliest and latest days a delivery can be moved to, from today.
const (
	EarliestDays = 1
	LatestDays   = 30
)

// ReschedulePlan is exactly what a date change does.
type ReschedulePlan struct {
	DeliveryID, OrderID string
	From, To            time.Time // days
}

// PlanReschedule works out moving a delivery to day to: from tomorrow to
// 30 days from now, and not the day it is already on.
func (db *DB) PlanReschedule(account, id string, to time.Time, now time.Time) (ReschedulePlan, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	d := db.delivery(account, id)
	if d == nil {
		return ReschedulePlan{}, fmt.Errorf("delivery %q: %w", id, ErrNotFound)
	}
	to = Day(to)
	today := Day(now)
	switch {
	case to.Before(today.AddDate(0, 0, EarliestDays)):
		return ReschedulePlan{}, fmt.Errorf("the new date must be tomorrow or later: %w", ErrInvalid)
	case to.After(today.AddDate(0, 0, LatestDays)):
		return ReschedulePlan{}, fmt.Errorf("the new date must be within %d days: %w", LatestDays, ErrInvalid)
	case to.Equal(d.Date):
		return ReschedulePlan{}, fmt.Errorf("the delivery is already on that date: %w", ErrInvalid)
	}
	return ReschedulePlan{DeliveryID: d.ID, OrderID: d.OrderID, From: d.Date, To: to}, nil
}

func (db *DB) delivery(account, id string) *Delivery {
	for _, d := range db.deliveries {
		if d.Account == account && d.ID == id {
			return d
		}
	}
	return nil
}

// Reschedule performs plan. ErrConflict when the delivery moved since.
func (db *DB) Reschedule(account string, plan ReschedulePlan, now time.Time) (Delivery, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	d := db.delivery(account, plan.DeliveryID)
	if d == nil {
		return Delivery{}, fmt.Errorf("delivery %q: %w", plan.DeliveryID, ErrNotFound)
	}
	if !d.Date.Equal(plan.From) {
		return Delivery{}, fmt.Errorf("delivery %s: %w", d.ID, ErrConflict)
	}
	d.Changes = appendBounded(d.Changes, DateChange{From: d.Date, To: plan.To, At: now})
	d.Date = plan.To
	c := *d
	c.Changes = slices.Clone(d.Changes)
	return c, nil
}
