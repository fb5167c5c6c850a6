-- The session store's database, next to Temporal's own.
CREATE DATABASE fastagent;
