-- The session store's database and its own user (the store never uses
-- Temporal's credentials). The password comes from the STORE_PASSWORD
-- environment variable of the postgres container.
\set store_password `echo "$STORE_PASSWORD"`
CREATE USER fastagent WITH PASSWORD :'store_password';
CREATE DATABASE fastagent OWNER fastagent;
