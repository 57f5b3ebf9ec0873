"""The local Vercel Sandbox: Vercel's sandbox REST API (vercel-sandbox's wire) over the vendor simulator."""
