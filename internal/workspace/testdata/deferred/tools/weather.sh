#!/usr/bin/env bash
echo sunny
