-- A shop's orders on PostgreSQL, as an application writes them: each order is one transaction
-- that inserts the order (the ledger: chaoskit looks every acknowledged one up after the run) and
-- takes one item off the stock, the popular items far more often than the others (zipf); lookups
-- read the stock of any item. Use it as a model for your own: `chaoskit validate` lists what runs.
--
-- @param item  zipf 1 1000 1.1
-- @param id    uniform 1 1000
-- @param note  string 16
-- @param n     sequence
-- @ledger shop_orders run_id worker n

-- @setup
CREATE TABLE IF NOT EXISTS shop_orders (
  run_id VARCHAR(32) NOT NULL, worker INT NOT NULL, n BIGINT NOT NULL,
  item INT NOT NULL, note VARCHAR(64), ordered_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, worker, n));
CREATE TABLE IF NOT EXISTS shop_stock (id INT PRIMARY KEY, qty BIGINT NOT NULL);
INSERT INTO shop_stock (id, qty) SELECT g, 1000000000 FROM generate_series(1, 1000) AS g ON CONFLICT DO NOTHING;

-- @transaction order weight=3
BEGIN;
INSERT INTO shop_orders (run_id, worker, n, item, note) VALUES (:run_id, :worker, :n, :item, :note);
UPDATE shop_stock SET qty = qty - 1 WHERE id = :item;
COMMIT;

-- @transaction lookup weight=2
SELECT qty FROM shop_stock WHERE id = :id;
