// Types for ansi.js (plain JavaScript so that browsers load it as it is, without a build step).
export interface AnsiState {
  fg: number | null;
  bg: number | null;
  bold: boolean;
  dim: boolean;
  italic: boolean;
  underline: boolean;
  inverse: boolean;
  pending: string;
}
export function escapeHtml(text: string): string;
export function nearest256(r: number, g: number, b: number): number;
export function rgbOf256(n: number): [number, number, number];
export class AnsiRenderer {
  constructor(state?: Partial<AnsiState> | null);
  state(): AnsiState;
  push(chunk: string): string;
}
export function ansiToHtml(text: string): string;
