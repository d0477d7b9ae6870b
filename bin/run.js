#!/usr/bin/env node
import { execute, settings } from '@oclif/core';

// This binary always runs the compiled dist/. Without this, oclif looks for
// TypeScript sources whenever NODE_ENV is "test" or "development" (as it is
// under vitest) and warns on stderr that it cannot find them.
settings.enableAutoTranspile = false;

await execute({ dir: import.meta.url });
